package llm

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// ChunkType is one of the seven stream chunk kinds (B-04).
type ChunkType string

// Chunk kinds.
const (
	ChunkStart     ChunkType = "start"
	ChunkText      ChunkType = "text"
	ChunkToolStart ChunkType = "tool_start"
	ChunkToolDelta ChunkType = "tool_delta"
	ChunkToolEnd   ChunkType = "tool_end"
	ChunkEnd       ChunkType = "end"
	ChunkError     ChunkType = "error"
)

// ToolCallDelta is the tool-call part of a chunk.
type ToolCallDelta struct {
	ID             string
	Name           string
	ArgumentsDelta string
}

// Chunk is one piece of a streamed answer (B-04). Usage and StopReason are
// set on end chunks only; Err on error chunks only.
type Chunk struct {
	// Index is the chunk's position in its generation, from 0.
	Index int
	// CorrelationID is shared by every chunk of one generation (B-06).
	CorrelationID string
	Type          ChunkType
	Text          string
	ToolCall      *ToolCallDelta
	Usage         *Usage
	StopReason    string
	Err           error
	Timestamp     time.Time
}

// StreamState is a state of the streaming state machine (B-05).
type StreamState int

// Stream states.
const (
	StateIdle StreamState = iota
	StateStarting
	StateStreaming
	StateToolCall
	StateComplete
	StateError
)

func (s StreamState) String() string {
	return [...]string{"idle", "starting", "streaming", "tool_call", "complete", "error"}[s]
}

// ErrBadTransition reports a chunk that the state machine does not allow.
var ErrBadTransition = errors.New("llm: chunk not allowed in this stream state")

// Machine is the streaming state machine of B-05. The zero value is Idle.
type Machine struct {
	state StreamState
	open  map[string]bool // tool calls started and not ended
}

// State returns the current state.
func (m *Machine) State() StreamState { return m.state }

// Begin moves Idle to Starting (Stream was called).
func (m *Machine) Begin() { m.state = StateStarting }

// Apply moves the machine by one chunk. Error chunks are accepted from any
// state; everything else after Complete or Error is rejected.
func (m *Machine) Apply(c Chunk) error {
	if c.Type == ChunkError {
		m.state = StateError
		return nil
	}
	bad := func() error {
		return fmt.Errorf("%w: %s in %s", ErrBadTransition, c.Type, m.state)
	}
	switch m.state {
	case StateComplete, StateError:
		return bad()
	case StateIdle:
		if c.Type != ChunkStart {
			return bad()
		}
		m.state = StateStreaming
		return nil
	case StateStarting:
		// The start chunk or the first content moves to Streaming.
		m.state = StateStreaming
		if c.Type == ChunkStart {
			return nil
		}
	}
	switch c.Type {
	case ChunkStart:
		return bad()
	case ChunkText:
		// Providers may interleave text with parallel tool calls.
		return nil
	case ChunkToolStart:
		if m.open == nil {
			m.open = map[string]bool{}
		}
		m.open[toolID(c)] = true
		m.state = StateToolCall
	case ChunkToolDelta:
		if !m.open[toolID(c)] {
			return bad()
		}
	case ChunkToolEnd:
		if !m.open[toolID(c)] {
			return bad()
		}
		delete(m.open, toolID(c))
		if len(m.open) == 0 {
			m.state = StateStreaming
		}
	case ChunkEnd:
		m.state = StateComplete
	default:
		return bad()
	}
	return nil
}

func toolID(c Chunk) string {
	if c.ToolCall == nil {
		return ""
	}
	return c.ToolCall.ID
}

// Emitter builds well-formed chunk sequences for a provider adapter: it
// numbers chunks, stamps them, checks them against the state machine and
// hands them to the handler.
type Emitter struct {
	h             Handler
	correlationID string
	next          int
	m             Machine
	now           func() time.Time
}

// NewEmitter returns an emitter for one generation.
func NewEmitter(h Handler, correlationID string) *Emitter {
	e := &Emitter{h: h, correlationID: correlationID, now: time.Now}
	e.m.Begin()
	return e
}

// State is the current stream state.
func (e *Emitter) State() StreamState { return e.m.State() }

func (e *Emitter) emit(c Chunk) error {
	if err := e.m.Apply(c); err != nil {
		return err
	}
	c.Index = e.next
	e.next++
	c.CorrelationID = e.correlationID
	c.Timestamp = e.now()
	return e.h(c)
}

// Start emits the start chunk.
func (e *Emitter) Start() error { return e.emit(Chunk{Type: ChunkStart}) }

// Text emits a text chunk; empty text is dropped.
func (e *Emitter) Text(s string) error {
	if s == "" {
		return nil
	}
	return e.emit(Chunk{Type: ChunkText, Text: s})
}

// ToolStart opens a tool call.
func (e *Emitter) ToolStart(id, name string) error {
	return e.emit(Chunk{Type: ChunkToolStart, ToolCall: &ToolCallDelta{ID: id, Name: name}})
}

// ToolDelta appends argument text to an open tool call.
func (e *Emitter) ToolDelta(id, delta string) error {
	if delta == "" {
		return nil
	}
	return e.emit(Chunk{Type: ChunkToolDelta, ToolCall: &ToolCallDelta{ID: id, ArgumentsDelta: delta}})
}

// ToolEnd closes a tool call.
func (e *Emitter) ToolEnd(id string) error {
	return e.emit(Chunk{Type: ChunkToolEnd, ToolCall: &ToolCallDelta{ID: id}})
}

// OpenTools returns the ids of tool calls started and not ended, sorted.
func (e *Emitter) OpenTools() []string {
	ids := make([]string, 0, len(e.m.open))
	for id := range e.m.open {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// End closes any open tool calls, then emits the end chunk.
func (e *Emitter) End(u Usage, stop string) error {
	for _, id := range e.OpenTools() {
		if err := e.ToolEnd(id); err != nil {
			return err
		}
	}
	return e.emit(Chunk{Type: ChunkEnd, Usage: &u, StopReason: stop})
}

// Fail emits an error chunk (best effort: the handler's answer is ignored,
// as the stream is over either way) and returns err.
func (e *Emitter) Fail(err error) error {
	if e.m.State() == StateError || e.m.State() == StateComplete {
		return err
	}
	_ = e.emit(Chunk{Type: ChunkError, Err: err})
	return err
}

// Accumulator assembles chunks into a Response (B-07). It is safe for
// concurrent use, and Response is usable at any point, so an aborted stream
// still yields its partial text and complete tool calls.
type Accumulator struct {
	mu       sync.Mutex
	text     strings.Builder
	order    []string
	calls    map[string]*ToolCall
	args     map[string]*strings.Builder
	usage    Usage
	stop     string
	ended    bool
	chunks   int
	first    time.Time
	last     time.Time
	text1    time.Time // first text chunk
	tool1    time.Time // first tool_start chunk
	provider string
	model    string
}

// NewAccumulator returns an empty accumulator for provider and model.
func NewAccumulator(provider, model string) *Accumulator {
	return &Accumulator{provider: provider, model: model, calls: map[string]*ToolCall{}, args: map[string]*strings.Builder{}}
}

// Add folds one chunk in. A delta for an unknown tool call is ignored.
func (a *Accumulator) Add(c Chunk) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.chunks++
	ts := c.Timestamp
	if ts.IsZero() {
		ts = time.Now()
	}
	if a.first.IsZero() {
		a.first = ts
	}
	a.last = ts
	switch c.Type {
	case ChunkText:
		a.text.WriteString(c.Text)
		if a.text1.IsZero() {
			a.text1 = ts
		}
	case ChunkToolStart:
		if c.ToolCall == nil {
			return
		}
		if a.tool1.IsZero() {
			a.tool1 = ts
		}
		if _, ok := a.calls[c.ToolCall.ID]; !ok {
			a.order = append(a.order, c.ToolCall.ID)
			a.calls[c.ToolCall.ID] = &ToolCall{ID: c.ToolCall.ID, Name: c.ToolCall.Name}
			a.args[c.ToolCall.ID] = &strings.Builder{}
		}
	case ChunkToolDelta:
		if c.ToolCall == nil {
			return
		}
		if b, ok := a.args[c.ToolCall.ID]; ok {
			b.WriteString(c.ToolCall.ArgumentsDelta)
		}
	case ChunkEnd:
		if c.Usage != nil {
			a.usage = *c.Usage
		}
		a.stop = c.StopReason
		a.ended = true
	}
}

// Handler returns a Handler that adds every chunk and forwards it to next
// (which may be nil).
func (a *Accumulator) Handler(next Handler) Handler {
	return func(c Chunk) error {
		a.Add(c)
		if next != nil {
			return next(c)
		}
		return nil
	}
}

// Response returns what has been accumulated so far.
func (a *Accumulator) Response() *Response {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := &Response{
		Content:        a.text.String(),
		Usage:          a.usage,
		FinishReason:   a.stop,
		Provider:       a.provider,
		Model:          a.model,
		ChunkCount:     a.chunks,
		StreamDuration: a.last.Sub(a.first),
		Partial:        !a.ended,
	}
	for _, id := range a.order {
		tc := *a.calls[id]
		tc.Arguments = a.args[id].String()
		r.ToolCalls = append(r.ToolCalls, tc)
	}
	return r
}

// StreamMetrics describe one generation (B-11). Durations are from the
// first chunk; zero when the event did not happen.
type StreamMetrics struct {
	TimeToFirstToken    time.Duration
	TimeToFirstToolCall time.Duration
	TotalDuration       time.Duration
	// TokensPerSecond is output tokens over the total duration (0 before the end chunk).
	TokensPerSecond float64
	ChunksReceived  int
	// EarlyAbort is true when the stream ended without an end chunk.
	EarlyAbort bool
}

// Metrics returns the stream's metrics so far.
func (a *Accumulator) Metrics() StreamMetrics {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := StreamMetrics{TotalDuration: a.last.Sub(a.first), ChunksReceived: a.chunks, EarlyAbort: !a.ended}
	if !a.text1.IsZero() {
		m.TimeToFirstToken = a.text1.Sub(a.first)
	}
	if !a.tool1.IsZero() {
		m.TimeToFirstToolCall = a.tool1.Sub(a.first)
	}
	if a.ended && m.TotalDuration > 0 {
		m.TokensPerSecond = float64(a.usage.OutputTokens) / m.TotalDuration.Seconds()
	}
	return m
}

// Stream buffer sizes (B-08).
const (
	ChunkBuffer = 100
	ErrBuffer   = 1
)

// ErrStreamIdle is the cancellation cause when no chunk arrived within the
// watchdog interval (B-12 case 5).
var ErrStreamIdle = errors.New("llm: no stream chunk within the idle timeout")

// StreamStats counts backpressure on a channel stream (B-11).
type StreamStats struct {
	mu                 sync.Mutex
	BackpressureEvents int
}

func (s *StreamStats) backpressure() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.BackpressureEvents++
	s.mu.Unlock()
}

// Backpressure returns the number of sends that found the buffer full.
func (s *StreamStats) Backpressure() int {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.BackpressureEvents
}

// StreamOptions tune StreamToChannel.
type StreamOptions struct {
	// Idle, when positive, cancels the call when no chunk arrives for that long.
	Idle time.Duration
	// Stats, when set, counts backpressure events.
	Stats *StreamStats
}

// StreamToChannel runs p.Stream in a goroutine and delivers its chunks on a
// channel buffered to 100 (B-08). A full buffer blocks the producer, which
// still honours ctx. The goroutine closes both channels when it is done; the
// error channel carries at most one error (ctx.Err(), ErrStreamIdle wrapped
// in a provider error, or the provider's error). Cancelling ctx always ends
// the goroutine, so no goroutine outlives the call.
func StreamToChannel(ctx context.Context, p Provider, req *Request, opts StreamOptions) (<-chan Chunk, <-chan error) {
	chunks := make(chan Chunk, ChunkBuffer)
	errs := make(chan error, ErrBuffer)
	go func() {
		defer close(chunks)
		defer close(errs)
		sctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		var wd *time.Timer
		if opts.Idle > 0 {
			wd = time.AfterFunc(opts.Idle, func() { cancel(ErrStreamIdle) })
			defer wd.Stop()
		}
		err := p.Stream(sctx, req, func(c Chunk) error {
			if wd != nil {
				wd.Reset(opts.Idle)
			}
			select {
			case chunks <- c:
				return nil
			default:
				opts.Stats.backpressure()
			}
			select {
			case chunks <- c:
				return nil
			case <-sctx.Done():
				return context.Cause(sctx)
			}
		})
		if err == nil && sctx.Err() != nil && ctx.Err() == nil {
			err = context.Cause(sctx)
		}
		if err != nil {
			if cause := context.Cause(sctx); errors.Is(cause, ErrStreamIdle) && !errors.Is(err, ErrStreamIdle) {
				err = fmt.Errorf("%w: %w", ErrStreamIdle, err)
			}
			errs <- err
		}
	}()
	return chunks, errs
}

// StreamWatched runs p.Stream with a no-chunk watchdog: when idle > 0 and no
// chunk arrives for that long, the call is cancelled and fails with
// ErrStreamIdle (B-12 case 5).
func StreamWatched(ctx context.Context, p Provider, req *Request, idle time.Duration, h Handler) error {
	if idle <= 0 {
		return p.Stream(ctx, req, h)
	}
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	wd := time.AfterFunc(idle, func() { cancel(ErrStreamIdle) })
	defer wd.Stop()
	err := p.Stream(sctx, req, func(c Chunk) error {
		wd.Reset(idle)
		return h(c)
	})
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(sctx), ErrStreamIdle) && !errors.Is(err, ErrStreamIdle) {
		err = fmt.Errorf("%w: %w", ErrStreamIdle, err)
	}
	return err
}
