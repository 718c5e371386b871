package topology

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	"sylk.dev/sylk/pkg/natsx"
)

// eventPayloads names the payload field each event type carries.
var eventPayloads = map[eventv1.EventType]protoreflect.Name{
	eventv1.EventType_EVENT_TYPE_MESSAGE_RECEIVED:        "message_received",
	eventv1.EventType_EVENT_TYPE_MESSAGE_ROUTED:          "message_routed",
	eventv1.EventType_EVENT_TYPE_MESSAGE_ANSWERED:        "message_answered",
	eventv1.EventType_EVENT_TYPE_MESSAGE_REROUTED:        "message_rerouted",
	eventv1.EventType_EVENT_TYPE_MESSAGE_TIMEOUT:         "message_unanswered",
	eventv1.EventType_EVENT_TYPE_MESSAGE_UNDELIVERABLE:   "message_unanswered",
	eventv1.EventType_EVENT_TYPE_CLARIFICATION_REQUESTED: "clarification_requested",
	eventv1.EventType_EVENT_TYPE_CLARIFICATION_ANSWERED:  "clarification_answered",
	eventv1.EventType_EVENT_TYPE_PLAN_AWAITING_APPROVAL:  "plan",
	eventv1.EventType_EVENT_TYPE_PLAN_APPROVED:           "plan",
	eventv1.EventType_EVENT_TYPE_PLAN_REJECTED:           "plan",
	eventv1.EventType_EVENT_TYPE_RUN_STARTED:             "run",
	eventv1.EventType_EVENT_TYPE_RUN_COMPLETED:           "run",
	eventv1.EventType_EVENT_TYPE_RUN_PAUSED:              "run",
	eventv1.EventType_EVENT_TYPE_RUN_RESUMED:             "run",
	eventv1.EventType_EVENT_TYPE_RUN_SETTLED:             "run",
	eventv1.EventType_EVENT_TYPE_RUN_SESSION_CHECK:       "run",
	eventv1.EventType_EVENT_TYPE_RUN_FIX_REQUESTED:       "run",
	eventv1.EventType_EVENT_TYPE_NODE_DISPATCHED:         "node",
	eventv1.EventType_EVENT_TYPE_NODE_COMPLETED:          "node",
	eventv1.EventType_EVENT_TYPE_NODE_RETRYING:           "node",
	eventv1.EventType_EVENT_TYPE_NODE_ACTION:             "node",
	eventv1.EventType_EVENT_TYPE_NODE_REOPENED:           "node",
	eventv1.EventType_EVENT_TYPE_NODE_ESCALATED:          "node",
	eventv1.EventType_EVENT_TYPE_NODE_HANDED_OFF:         "node",
	eventv1.EventType_EVENT_TYPE_SESSION_RUNS_PAUSED:     "session_runs",
	eventv1.EventType_EVENT_TYPE_SESSION_RUNS_RESUMED:    "session_runs",
	eventv1.EventType_EVENT_TYPE_SESSION_RUNS_CANCELLED:  "session_runs",
	eventv1.EventType_EVENT_TYPE_SESSION_CREATED:         "session",
	eventv1.EventType_EVENT_TYPE_SESSION_ACTIVATED:       "session",
	eventv1.EventType_EVENT_TYPE_SESSION_SUSPENDED:       "session",
	eventv1.EventType_EVENT_TYPE_SESSION_RESUMED:         "session",
	eventv1.EventType_EVENT_TYPE_SESSION_COMPLETED:       "session",
	eventv1.EventType_EVENT_TYPE_SESSION_FAILED:          "session",
	eventv1.EventType_EVENT_TYPE_SESSION_UPDATED:         "session",
	eventv1.EventType_EVENT_TYPE_TASK_HELP:               "task_help",
	eventv1.EventType_EVENT_TYPE_INDEXING_PROGRESS:       "indexing",
	eventv1.EventType_EVENT_TYPE_ERROR:                   "error",
	eventv1.EventType_EVENT_TYPE_TOOL_CALL:               "tool_call",
	eventv1.EventType_EVENT_TYPE_AGENT_TEXT:              "agent",
	eventv1.EventType_EVENT_TYPE_AGENT_WARNING:           "agent",
	eventv1.EventType_EVENT_TYPE_AGENT_REVERTED:          "agent",
	eventv1.EventType_EVENT_TYPE_REVIEW_COMPLETED:        "review",
	eventv1.EventType_EVENT_TYPE_PLAN_REVISED:            "plan_revised",
	eventv1.EventType_EVENT_TYPE_RUN_DELIVERED:           "run",
	eventv1.EventType_EVENT_TYPE_SESSION_BRIEFING:        "briefing",
}

// EventPayload names the payload field events of type t carry ("" for an
// unknown type).
func EventPayload(t eventv1.EventType) protoreflect.Name { return eventPayloads[t] }

// CheckEvent reports an event whose payload is not the one its type
// carries, or that names no session.
func CheckEvent(ev *eventv1.Event) error {
	want, ok := eventPayloads[ev.GetType()]
	if !ok {
		return fmt.Errorf("event type %v is not publishable", ev.GetType())
	}
	if ev.GetSessionId() == "" {
		return fmt.Errorf("event %v names no session", ev.GetType())
	}
	m := ev.ProtoReflect()
	set := m.WhichOneof(m.Descriptor().Oneofs().ByName("payload"))
	if set == nil || set.Name() != want {
		got := protoreflect.Name("none")
		if set != nil {
			got = set.Name()
		}
		return fmt.Errorf("event %v carries %s, not %s", ev.GetType(), got, want)
	}
	return nil
}

// PrepareEvent checks ev and stamps its creation time when unset.
func PrepareEvent(ev *eventv1.Event) error {
	if err := CheckEvent(ev); err != nil {
		return err
	}
	if ev.CreateTime == nil {
		ev.CreateTime = timestamppb.Now()
	}
	return nil
}

// PublishEvent appends ev to its session's stream (ev.SessionId, of
// tenant) and returns its sequence. id de-duplicates the event on the
// stream ("" for none). ev.Source says the subject's origin.
func PublishEvent(ctx context.Context, b *natsx.Bus, tenant, id string, ev *eventv1.Event) (uint64, error) {
	if err := PrepareEvent(ev); err != nil {
		return 0, err
	}
	ack, err := b.Publish(ctx, EventSubject(b, tenant, ev.GetSessionId(), ev.GetSource()), id, ev)
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}
