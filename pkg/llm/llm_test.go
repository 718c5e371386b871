package llm_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/llm"
)

// scripted streams a fixed chunk script; with block set it then waits for ctx.
type scripted struct {
	script func(em *llm.Emitter) error
	block  bool
}

func (s scripted) Name() string                                           { return "scripted" }
func (s scripted) Models() []llm.ModelInfo                                { return nil }
func (s scripted) Resolve(m string) string                                { return m }
func (s scripted) CountTokens(context.Context, *llm.Request) (int, error) { return 0, nil }
func (s scripted) Complete(context.Context, *llm.Request) (*llm.Response, error) {
	return nil, errors.New("not used")
}
func (s scripted) Stream(ctx context.Context, req *llm.Request, h llm.Handler) error {
	em := llm.NewEmitter(h, req.ID)
	if err := em.Start(); err != nil {
		return em.Fail(err)
	}
	if err := s.script(em); err != nil {
		return em.Fail(err)
	}
	if s.block {
		<-ctx.Done()
		return em.Fail(context.Cause(ctx))
	}
	return em.End(llm.Usage{InputTokens: 3, OutputTokens: 5}, "end_turn")
}

func TestAccumulatorInterleavedToolCalls(t *testing.T) {
	t.Parallel()
	acc := llm.NewAccumulator("p", "m")
	em := llm.NewEmitter(acc.Handler(nil), "corr")
	require.NoError(t, em.Start())
	require.NoError(t, em.Text("Hel"))
	require.NoError(t, em.Text("lo"))
	require.NoError(t, em.ToolStart("id1", "read"))
	require.NoError(t, em.ToolStart("id2", "grep"))
	require.NoError(t, em.ToolDelta("id1", `{"pa`))
	require.NoError(t, em.ToolDelta("id2", `{"q":`))
	require.NoError(t, em.ToolDelta("id1", `th":"a"}`))
	require.NoError(t, em.ToolDelta("id2", `"x"}`))
	acc.Add(llm.Chunk{Type: llm.ChunkToolDelta, ToolCall: &llm.ToolCallDelta{ID: "unknown", ArgumentsDelta: "junk"}})
	require.NoError(t, em.End(llm.Usage{InputTokens: 10, OutputTokens: 4}, "tool_use"))

	r := acc.Response()
	require.Equal(t, "Hello", r.Content)
	require.Equal(t, []llm.ToolCall{{ID: "id1", Name: "read", Arguments: `{"path":"a"}`}, {ID: "id2", Name: "grep", Arguments: `{"q":"x"}`}}, r.ToolCalls)
	require.Equal(t, llm.Usage{InputTokens: 10, OutputTokens: 4}, r.Usage)
	require.Equal(t, "tool_use", r.FinishReason)
	require.False(t, r.Partial)
	require.Equal(t, llm.StateComplete, em.State())
	m := acc.Metrics()
	require.Equal(t, 13, m.ChunksReceived)
	require.False(t, m.EarlyAbort)
	require.LessOrEqual(t, m.TimeToFirstToken, m.TimeToFirstToolCall)
}

func TestMachineTransitions(t *testing.T) {
	t.Parallel()
	tool := func(typ llm.ChunkType, id string) llm.Chunk {
		return llm.Chunk{Type: typ, ToolCall: &llm.ToolCallDelta{ID: id}}
	}
	tests := []struct {
		name   string
		chunks []llm.Chunk
		final  llm.StreamState
		bad    bool
	}{
		{"text then end", []llm.Chunk{{Type: llm.ChunkStart}, {Type: llm.ChunkText}, {Type: llm.ChunkEnd}}, llm.StateComplete, false},
		{"first content without start", []llm.Chunk{{Type: llm.ChunkText}}, llm.StateStreaming, false},
		{"tool call", []llm.Chunk{{Type: llm.ChunkStart}, tool(llm.ChunkToolStart, "a")}, llm.StateToolCall, false},
		{"tool call closed", []llm.Chunk{{Type: llm.ChunkStart}, tool(llm.ChunkToolStart, "a"), tool(llm.ChunkToolDelta, "a"), tool(llm.ChunkToolEnd, "a")}, llm.StateStreaming, false},
		{"delta for unknown tool", []llm.Chunk{{Type: llm.ChunkStart}, tool(llm.ChunkToolDelta, "a")}, 0, true},
		{"chunk after end", []llm.Chunk{{Type: llm.ChunkStart}, {Type: llm.ChunkEnd}, {Type: llm.ChunkText}}, 0, true},
		{"error from anywhere", []llm.Chunk{{Type: llm.ChunkStart}, tool(llm.ChunkToolStart, "a"), {Type: llm.ChunkError}}, llm.StateError, false},
		{"second start", []llm.Chunk{{Type: llm.ChunkStart}, {Type: llm.ChunkStart}}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var m llm.Machine
			m.Begin()
			var err error
			for _, c := range tt.chunks {
				if err = m.Apply(c); err != nil {
					break
				}
			}
			if tt.bad {
				require.ErrorIs(t, err, llm.ErrBadTransition)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.final, m.State())
		})
	}
}

func TestStreamToChannelCorrelationAndOrder(t *testing.T) {
	t.Parallel()
	p := scripted{script: func(em *llm.Emitter) error {
		for i := range 5 {
			if err := em.Text(fmt.Sprint(i)); err != nil {
				return err
			}
		}
		return nil
	}}
	chunks, errs := llm.StreamToChannel(t.Context(), p, &llm.Request{ID: "gen-1"}, llm.StreamOptions{})
	var got []llm.Chunk
	for c := range chunks {
		got = append(got, c)
	}
	require.NoError(t, <-errs)
	require.Len(t, got, 7)
	require.Equal(t, llm.ChunkStart, got[0].Type)
	require.Equal(t, llm.ChunkEnd, got[6].Type)
	for i, c := range got {
		require.Equal(t, "gen-1", c.CorrelationID)
		require.Equal(t, i, c.Index)
	}
}

func TestStreamToChannelCancelKeepsPartial(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	p := scripted{block: true, script: func(em *llm.Emitter) error { return em.Text("partial answer") }}
	chunks, errs := llm.StreamToChannel(ctx, p, &llm.Request{ID: "g"}, llm.StreamOptions{})
	acc := llm.NewAccumulator("scripted", "m")
	for c := range chunks {
		acc.Add(c)
		if c.Type == llm.ChunkText {
			cancel()
		}
	}
	// Both channels are closed: the producing goroutine has returned.
	require.ErrorIs(t, <-errs, context.Canceled)
	_, open := <-errs
	require.False(t, open)
	r := acc.Response()
	require.Equal(t, "partial answer", r.Content)
	require.True(t, r.Partial)
}

func TestStreamToChannelIdleWatchdog(t *testing.T) {
	t.Parallel()
	p := scripted{block: true, script: func(em *llm.Emitter) error { return em.Text("x") }}
	chunks, errs := llm.StreamToChannel(t.Context(), p, &llm.Request{}, llm.StreamOptions{Idle: 50 * time.Millisecond})
	var last llm.Chunk
	for c := range chunks {
		last = c
	}
	err := <-errs
	require.ErrorIs(t, err, llm.ErrStreamIdle)
	require.Equal(t, llm.ChunkError, last.Type)
	require.Equal(t, llm.TierTransient, llm.DefaultClassifier().Classify(err))
}

func TestStreamToChannelSlowConsumer(t *testing.T) {
	t.Parallel()
	const n = 250
	p := scripted{script: func(em *llm.Emitter) error {
		for range n {
			if err := em.Text("t"); err != nil {
				return err
			}
		}
		return nil
	}}
	stats := &llm.StreamStats{}
	chunks, errs := llm.StreamToChannel(t.Context(), p, &llm.Request{}, llm.StreamOptions{Stats: stats})
	// Do not read until the producer has filled the buffer and blocked.
	require.Eventually(t, func() bool { return len(chunks) == llm.ChunkBuffer && stats.Backpressure() > 0 }, 5*time.Second, time.Millisecond)
	count := 0
	for range chunks {
		count++
	}
	require.NoError(t, <-errs)
	require.Equal(t, n+2, count)
	require.Positive(t, stats.Backpressure())
}

func TestStreamToChannelSlowConsumerCancel(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	p := scripted{script: func(em *llm.Emitter) error {
		for {
			if err := em.Text("t"); err != nil {
				return err
			}
		}
	}}
	chunks, errs := llm.StreamToChannel(ctx, p, &llm.Request{}, llm.StreamOptions{})
	require.Eventually(t, func() bool { return len(chunks) == llm.ChunkBuffer }, 5*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-errs, context.Canceled)
	for range chunks { //nolint:revive // drain until the producer closes it
	}
}

func TestHandlerErrorHaltsGeneration(t *testing.T) {
	t.Parallel()
	stop := errors.New("budget exceeded")
	acc := llm.NewAccumulator("p", "m")
	p := scripted{script: func(em *llm.Emitter) error {
		for i := 0; ; i++ {
			if err := em.Text("w "); err != nil {
				return err
			}
		}
	}}
	n := 0
	err := p.Stream(t.Context(), &llm.Request{}, acc.Handler(func(c llm.Chunk) error {
		if c.Type == llm.ChunkText {
			n++
			if n == 3 {
				return stop
			}
		}
		return nil
	}))
	require.ErrorIs(t, err, stop)
	require.Equal(t, "w w w ", acc.Response().Content)
}

func TestClassifier(t *testing.T) {
	t.Parallel()
	c := llm.DefaultClassifier()
	tests := []struct {
		name string
		err  error
		want llm.Tier
	}{
		{"429", &llm.Error{Provider: "p", StatusCode: 429}, llm.TierRateLimit},
		{"502", &llm.Error{Provider: "p", StatusCode: 502}, llm.TierDegrading},
		{"504", &llm.Error{Provider: "p", StatusCode: 504}, llm.TierDegrading},
		{"unknown", errors.New("something odd"), llm.TierPermanent},
		{"user-fixable beats transient", errors.New("invalid credentials: connection reset"), llm.TierUserFixable},
		{"401", &llm.Error{Provider: "p", StatusCode: 401, Message: "HTTP 401"}, llm.TierUserFixable},
		{"transient", errors.New("read tcp: connection reset by peer"), llm.TierTransient},
		{"deadline", context.DeadlineExceeded, llm.TierTransient},
		{"cancel", context.Canceled, llm.TierPermanent},
		{"no credentials", llm.ErrNoCredentials, llm.TierUserFixable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, c.Classify(tt.err))
		})
	}
}

func TestRetryDelays(t *testing.T) {
	t.Parallel()
	ps := llm.DefaultRetryPolicies()
	ms := time.Millisecond
	var transient []time.Duration
	for n := 1; ; n++ {
		d, ok := ps.Next(llm.TierTransient, n, nil)
		if !ok {
			break
		}
		transient = append(transient, d)
	}
	require.Equal(t, []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms}, transient)
	var degrading []time.Duration
	for n := 1; ; n++ {
		d, ok := ps.Next(llm.TierDegrading, n, nil)
		if !ok {
			break
		}
		degrading = append(degrading, d)
	}
	require.Equal(t, []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second}, degrading)
	for _, tier := range []llm.Tier{llm.TierPermanent, llm.TierUserFixable} {
		_, ok := ps.Next(tier, 1, nil)
		require.False(t, ok)
	}
	d, ok := ps.Next(llm.TierRateLimit, 1, &llm.Error{StatusCode: 429, RetryAfter: 7 * time.Second})
	require.True(t, ok)
	require.Equal(t, 7*time.Second, d)
	d, _ = ps.Next(llm.TierRateLimit, 10, nil)
	require.Equal(t, 60*time.Second, d)
}

func TestRetryStopsOnPermanent(t *testing.T) {
	t.Parallel()
	ps := llm.RetryPolicies{llm.TierTransient: {MaxRetries: 2, Initial: time.Millisecond, Multiplier: 2}}
	calls := 0
	err := llm.Retry(t.Context(), llm.DefaultClassifier(), ps, func(context.Context) error {
		calls++
		return errors.New("connection reset")
	}, nil)
	require.Error(t, err)
	require.Equal(t, 3, calls, "max counts retries after the first attempt")
	calls = 0
	err = llm.Retry(t.Context(), llm.DefaultClassifier(), ps, func(context.Context) error {
		calls++
		return errors.New("file not found")
	}, nil)
	require.Error(t, err)
	require.Equal(t, 1, calls)
}

func TestFit(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 400) // 100 tokens
	conv := func(n int) []llm.Message {
		var ms []llm.Message
		ms = append(ms, llm.Message{Role: llm.RoleSystem, Content: "rules"})
		for i := range n {
			ms = append(ms, llm.Message{Role: llm.RoleUser, Content: fmt.Sprintf("%d %s", i, long)})
		}
		return ms
	}
	t.Run("fits unchanged", func(t *testing.T) {
		t.Parallel()
		req := &llm.Request{Messages: conv(3)}
		r, err := llm.Fitter{Reserve: 100}.Fit(t.Context(), req, 10_000)
		require.NoError(t, err)
		require.Equal(t, llm.FitUnchanged, r.Strategy)
		require.Equal(t, req.Messages, r.Messages)
	})
	t.Run("summarised", func(t *testing.T) {
		t.Parallel()
		var handedOff int
		f := llm.Fitter{
			Reserve:   100,
			Summarize: func(_ context.Context, ms []llm.Message) (string, error) { return "they talked", nil },
			Overflow:  func(_ context.Context, ms []llm.Message) error { handedOff = len(ms); return errors.New("store down") },
		}
		r, err := f.Fit(t.Context(), &llm.Request{Messages: conv(20)}, 1100)
		require.NoError(t, err)
		require.Equal(t, llm.FitSummarized, r.Strategy)
		require.Equal(t, llm.RoleSystem, r.Messages[0].Role)
		require.Equal(t, "rules", r.Messages[0].Content)
		require.Contains(t, r.Messages[1].Content, fmt.Sprintf("[Context summary of %d earlier messages]", r.Dropped))
		require.Equal(t, handedOff, r.Dropped)
		require.True(t, strings.HasPrefix(r.Messages[len(r.Messages)-1].Content, "19 "), "the newest message is kept last")
		for i := 3; i < len(r.Messages); i++ {
			require.Less(t, r.Messages[i-1].Content, r.Messages[i].Content, "order preserved")
		}
	})
	t.Run("summariser fails", func(t *testing.T) {
		t.Parallel()
		f := llm.Fitter{Reserve: 100, Summarize: func(context.Context, []llm.Message) (string, error) { return "", errors.New("down") }}
		r, err := f.Fit(t.Context(), &llm.Request{Messages: conv(20)}, 1100)
		require.NoError(t, err)
		require.Equal(t, llm.FitTruncated, r.Strategy)
		require.Equal(t, "rules", r.Messages[0].Content)
		for _, m := range r.Messages[1:] {
			require.NotContains(t, m.Content, "Context summary")
		}
	})
	t.Run("smart select", func(t *testing.T) {
		t.Parallel()
		ms := conv(10)
		ms[2].Relevance, ms[7].Relevance, ms[5].Relevance = 0.9, 0.8, 0.1
		r, err := llm.Fitter{Reserve: 100}.Fit(t.Context(), &llm.Request{Messages: ms}, 340)
		require.NoError(t, err)
		require.Equal(t, llm.FitSmartSelect, r.Strategy)
		require.Len(t, r.Messages, 3)
		require.Equal(t, ms[2].Content, r.Messages[1].Content)
		require.Equal(t, ms[7].Content, r.Messages[2].Content)
	})
	t.Run("system prompt too large", func(t *testing.T) {
		t.Parallel()
		_, err := llm.Fitter{Reserve: 100}.Fit(t.Context(), &llm.Request{System: strings.Repeat("s", 4000)}, 500)
		require.ErrorIs(t, err, llm.ErrContextTooLarge)
	})
}

func TestCatalogueAndAliases(t *testing.T) {
	t.Parallel()
	a := llm.ProviderConfig{Fast: "my-fast"}.Aliases(llm.Anthropic)
	require.Equal(t, "my-fast", a.Resolve("fast"))
	require.Equal(t, "claude-sonnet-4-5", a.Resolve(""))
	require.Equal(t, "claude-opus-4-1", a.Resolve("powerful"))
	require.Equal(t, "explicit-id", a.Resolve("explicit-id"))
	m, ok := llm.LookupModel(llm.Anthropic, "claude-sonnet-4-5-20250929")
	require.True(t, ok)
	require.Equal(t, 200_000, m.MaxContext)
	require.InDelta(t, 3.0+15.0, llm.Cost(llm.Anthropic, "claude-sonnet-4-5", llm.Usage{InputTokens: 1e6, OutputTokens: 1e6}), 1e-9)
	_, ok = llm.LookupModel(llm.OpenAI, "some-local-model")
	require.False(t, ok)
}

func TestConfigDefaultProvider(t *testing.T) {
	t.Parallel()
	require.Equal(t, llm.Local, llm.Config{}.DefaultProvider())
	require.Equal(t, llm.OpenAI, llm.Config{OpenAI: llm.ProviderConfig{BaseURL: "http://127.0.0.1:11434/v1"}}.DefaultProvider())
	err := llm.Config{Provider: llm.Anthropic, MaxTokens: 1}.Validate()
	require.ErrorContains(t, err, "no API key")
	require.NotContains(t, fmt.Sprint(llm.Config{Anthropic: llm.ProviderConfig{APIKey: "sk-secret"}}.Validate()), "sk-secret")
}

// A Retry-After beyond a day, in seconds or as a date, is taken as a day:
// a figure too large for a Duration does not wrap round to no wait.
func TestParseRetryAfterBounded(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	require.Equal(t, 7*time.Second, llm.ParseRetryAfter("7", now))
	require.Equal(t, 1500*time.Millisecond, llm.ParseRetryAfter("1.5", now))
	require.Equal(t, llm.MaxRetryAfter, llm.ParseRetryAfter("1e300", now))
	require.Equal(t, llm.MaxRetryAfter, llm.ParseRetryAfter("99999999999999", now))
	require.Equal(t, llm.MaxRetryAfter, llm.ParseRetryAfter(now.AddDate(1, 0, 0).Format(time.RFC1123), now))
	require.Equal(t, time.Hour, llm.ParseRetryAfter(now.Add(time.Hour).Format(time.RFC1123), now))
	require.Zero(t, llm.ParseRetryAfter("-3", now))
}
