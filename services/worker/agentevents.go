package worker

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/pkg/agent"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/secrets"
	"sylk.dev/sylk/pkg/topology"
)

// textFlushBytes is how much of the model's text gathers before it goes to
// the session as one event (and at the end of each turn, and before each
// tool call).
const textFlushBytes = 512

// eventTimeout bounds publishing one agent event.
const eventTimeout = 5 * time.Second

// agentEvents puts a task agent's steps on its session's event stream, so
// that a person watches it work. A task outside a session publishes
// nothing (its report keeps the tool calls). A failed publish is logged:
// the work goes on.
type agentEvents struct {
	s     *Service
	d     *taskv1.TaskDispatch
	role  string
	log   *slog.Logger
	mu    sync.Mutex
	text  strings.Builder
	turn  int
	seq   int
	quiet bool
}

func (s *Service) agentEvents(d *taskv1.TaskDispatch, role string) *agentEvents {
	return &agentEvents{s: s, d: d, role: role, quiet: d.GetSessionId() == "" || s.bus == nil,
		log: s.log.With(logx.KeyRunID, d.GetRunId(), "node", d.GetNodeId())}
}

// publish turns a loop event into session events.
func (e *agentEvents) publish(ev agent.Event) {
	if e.quiet {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), eventTimeout)
	defer cancel()
	switch ev.Kind {
	case agent.EventText:
		e.mu.Lock()
		e.turn = ev.Turn
		e.text.WriteString(ev.Text)
		full := e.text.Len() >= textFlushBytes
		e.mu.Unlock()
		if full {
			e.flushText(ctx)
		}
	case agent.EventTurn:
		e.flushText(ctx)
	case agent.EventToolStart:
		e.flushText(ctx)
		e.send(ctx, eventv1.EventType_EVENT_TYPE_TOOL_CALL, fmt.Sprintf("%s %s(%s)", e.role, ev.Tool, secrets.Scrub(ev.Args)),
			&eventv1.Event_ToolCall{ToolCall: e.toolCall(ev, eventv1.ToolCallStatus_TOOL_CALL_STATUS_STARTED)})
	case agent.EventToolEnd:
		status, word := eventv1.ToolCallStatus_TOOL_CALL_STATUS_SUCCEEDED, "ok"
		if ev.Err {
			status, word = eventv1.ToolCallStatus_TOOL_CALL_STATUS_FAILED, "failed"
		}
		tc := e.toolCall(ev, status)
		tc.Duration, tc.Summary = durationpb.New(ev.Duration), secrets.Scrub(ev.Text)
		e.send(ctx, eventv1.EventType_EVENT_TYPE_TOOL_CALL, fmt.Sprintf("%s %s %s: %s", e.role, ev.Tool, word, tc.Summary),
			&eventv1.Event_ToolCall{ToolCall: tc})
	case agent.EventWarning:
		e.send(ctx, eventv1.EventType_EVENT_TYPE_AGENT_WARNING, "the "+e.role+" is warned: two tool calls failed in a row",
			&eventv1.Event_Agent{Agent: e.step(ev.Turn, ev.Text)})
	case agent.EventRevert:
		e.send(ctx, eventv1.EventType_EVENT_TYPE_AGENT_REVERTED, "the "+e.role+"'s changes were reverted after three failed tool calls in a row; it asks for help",
			&eventv1.Event_Agent{Agent: e.step(ev.Turn, ev.Text)})
	}
}

// flushText sends the model's text gathered so far.
func (e *agentEvents) flushText(ctx context.Context) {
	if e.quiet {
		return
	}
	e.mu.Lock()
	text, turn := e.text.String(), e.turn
	e.text.Reset()
	e.mu.Unlock()
	if strings.TrimSpace(text) == "" {
		return
	}
	text = secrets.Scrub(text)
	e.send(ctx, eventv1.EventType_EVENT_TYPE_AGENT_TEXT, text, &eventv1.Event_Agent{Agent: e.step(turn, text)})
}

func (e *agentEvents) toolCall(ev agent.Event, status eventv1.ToolCallStatus) *eventv1.ToolCallEvent {
	return &eventv1.ToolCallEvent{Run: "runs/" + e.d.GetRunId(), Node: e.d.GetNodeId(), Attempt: e.d.GetAttempt(), Agent: e.role,
		Turn: int32(ev.Turn), CallId: ev.CallID, Tool: ev.Tool, Args: secrets.Scrub(ev.Args), Status: status}
}

func (e *agentEvents) step(turn int, text string) *eventv1.AgentStepEvent {
	return &eventv1.AgentStepEvent{Run: "runs/" + e.d.GetRunId(), Node: e.d.GetNodeId(), Attempt: e.d.GetAttempt(), Agent: e.role,
		Turn: int32(turn), Text: text}
}

// send publishes one event, de-duplicated on the dispatch and its place in
// the task's sequence.
func (e *agentEvents) send(ctx context.Context, typ eventv1.EventType, text string, payload any) {
	e.mu.Lock()
	e.seq++
	id := fmt.Sprintf("%s:%s:%d:agent:%d", e.d.GetRunId(), e.d.GetNodeId(), e.d.GetAttempt(), e.seq)
	e.mu.Unlock()
	ev := &eventv1.Event{SessionId: e.d.GetSessionId(), Type: typ, Source: e.role, CorrelationId: "runs/" + e.d.GetRunId(), Text: text}
	switch p := payload.(type) {
	case *eventv1.Event_ToolCall:
		ev.Payload = p
	case *eventv1.Event_Agent:
		ev.Payload = p
	}
	if _, err := topology.PublishEvent(ctx, e.s.bus, e.d.GetTenantId(), id, ev); err != nil {
		e.log.WarnContext(ctx, "publish an agent event", slog.String("type", typ.String()), logx.Err(err))
	}
}
