package topology

import (
	"testing"

	"github.com/stretchr/testify/require"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
)

// Every event type but the zero value has a payload field, and that field
// exists in the event's payload oneof.
func TestEveryEventTypeHasItsPayload(t *testing.T) {
	t.Parallel()
	oneof := (&eventv1.Event{}).ProtoReflect().Descriptor().Oneofs().ByName("payload")
	for n, name := range eventv1.EventType_name {
		typ := eventv1.EventType(n)
		if typ == eventv1.EventType_EVENT_TYPE_UNSPECIFIED {
			continue
		}
		field := EventPayload(typ)
		require.NotEmpty(t, field, "%s has no payload", name)
		require.NotNil(t, oneof.Fields().ByName(field), "%s names %s, which is not a payload field", name, field)
	}
}

func TestCheckEvent(t *testing.T) {
	t.Parallel()
	answered := &eventv1.Event{SessionId: "s", Type: eventv1.EventType_EVENT_TYPE_MESSAGE_ANSWERED,
		Payload: &eventv1.Event_MessageAnswered{MessageAnswered: &messagev1.AgentAnswer{Text: "x"}}}
	require.NoError(t, CheckEvent(answered))

	wrong := &eventv1.Event{SessionId: "s", Type: eventv1.EventType_EVENT_TYPE_RUN_STARTED,
		Payload: &eventv1.Event_MessageAnswered{MessageAnswered: &messagev1.AgentAnswer{}}}
	require.ErrorContains(t, CheckEvent(wrong), "carries message_answered, not run")

	none := &eventv1.Event{SessionId: "s", Type: eventv1.EventType_EVENT_TYPE_RUN_STARTED}
	require.ErrorContains(t, CheckEvent(none), "carries none")

	require.Error(t, CheckEvent(&eventv1.Event{SessionId: "s"}))
	require.ErrorContains(t, CheckEvent(&eventv1.Event{Type: eventv1.EventType_EVENT_TYPE_MESSAGE_ANSWERED,
		Payload: &eventv1.Event_MessageAnswered{MessageAnswered: &messagev1.AgentAnswer{}}}), "no session")
}
