package architect

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	architectv1 "sylk.dev/sylk/gen/go/sylk/architect/v1"
	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/topology"
)

func inboxEnvelope(sessionID, text string) *messagev1.Envelope {
	return &messagev1.Envelope{
		Id: ids.New(), CorrelationId: ids.New(), TenantId: "t1", UserId: "u1", SessionId: sessionID,
		Source: "guide", Target: "architect", Type: messagev1.MessageType_MESSAGE_TYPE_USER_INPUT,
		CreatedAt: timestamppb.Now(), Priority: messagev1.Priority_PRIORITY_USER,
		StructuredIntent: &messagev1.StructuredIntent{OriginalRequest: text, IntentType: "CREATE"},
		Payload:          &messagev1.Envelope_UserInput{UserInput: &messagev1.UserInput{Text: text}},
	}
}

func TestInboxDraftsPlans(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	testenv.Start(t, f.svc.Run)
	ctx := as("t1", "u1")
	inbox := topology.InboxSubject(f.bus, topology.AgentArchitect)
	inboxCount := func(result string) float64 {
		return testutil.ToFloat64(f.svc.metrics.inbox.WithLabelValues(result))
	}

	sessionID := ids.New()
	env := inboxEnvelope(sessionID, "Implement rate limiting for the gateway")
	_, err := f.bus.Publish(ctx, inbox, env.GetId(), env)
	require.NoError(t, err)

	var plans []*architectv1.Plan
	require.Eventually(t, func() bool {
		resp, err := f.svc.ListPlans(ctx, &architectv1.ListPlansRequest{Parent: "sessions/" + sessionID})
		require.NoError(t, err)
		plans = resp.GetPlans()
		return len(plans) == 1
	}, 10*time.Second, 20*time.Millisecond)
	p := plans[0]
	require.Equal(t, "Implement rate limiting for the gateway", p.GetRequest())
	require.Equal(t, "local", p.GetPlanner())
	require.Equal(t, architectv1.PlanState_PLAN_STATE_AWAITING_APPROVAL, p.GetState())
	require.Len(t, p.GetDag().GetNodes(), 3)

	var evs []*eventv1.Event
	require.Eventually(t, func() bool {
		evs = events(t, f.bus, "t1", sessionID)
		return len(evs) == 1
	}, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, eventv1.EventType_EVENT_TYPE_PLAN_AWAITING_APPROVAL, evs[0].GetType())
	require.Equal(t, env.GetCorrelationId(), evs[0].GetCorrelationId())
	require.Equal(t, "Plan ready for approval: Implement rate limiting for the gateway (3 tasks). Success criteria: 0 stated; "+
		"what api/rate-limiting implies is not included (no academic configured). Approve with POST /v1/"+p.GetName()+":approve, "+
		"or ask for changes with POST /v1/"+p.GetName()+":revise. Note: "+noteNoRepository+"; "+noteOffline, evs[0].GetText())

	// The same envelope delivered again (a new stream message) finds the plan.
	_, err = f.bus.Publish(ctx, inbox, "", env)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return inboxCount("duplicate") == 1 }, 10*time.Second, 20*time.Millisecond)
	resp, err := f.svc.ListPlans(ctx, &architectv1.ListPlansRequest{Parent: "sessions/" + sessionID})
	require.NoError(t, err)
	require.Len(t, resp.GetPlans(), 1)

	// A request too large to plan is refused with an error event, not
	// drafted.
	big := inboxEnvelope(ids.New(), strings.Repeat("add ", 5000))
	_, err = f.bus.Publish(ctx, inbox, big.GetId(), big)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return inboxCount("refused") == 1 }, 10*time.Second, 20*time.Millisecond)
	// The refusal is counted before it is published.
	var answered []*eventv1.Event
	require.Eventually(t, func() bool {
		answered = events(t, f.bus, "t1", big.GetSessionId())
		return len(answered) == 1
	}, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, eventv1.EventType_EVENT_TYPE_ERROR, answered[0].GetType())
	require.Equal(t, "architect", answered[0].GetSource())
	require.Equal(t, big.GetCorrelationId(), answered[0].GetCorrelationId())
	require.Contains(t, answered[0].GetText(), "over the limit of 16384")
	require.Equal(t, "INVALID_FIELD", answered[0].GetError().GetReason())
	require.Equal(t, answered[0].GetText(), answered[0].GetError().GetMessage())

	// Envelopes without an owner are dropped.
	orphan := inboxEnvelope(ids.New(), "add a thing")
	orphan.TenantId = ""
	_, err = f.bus.Publish(ctx, inbox, orphan.GetId(), orphan)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return inboxCount("rejected") == 1 }, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, 1.0, inboxCount("drafted"))
}
