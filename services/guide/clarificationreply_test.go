package guide

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
)

// TestPlainReplyAnswersClarification: the next chat message answers the
// latest pending question without naming it, by a number, an agent's
// name, words that describe one agent, or a rephrase.
func TestPlainReplyAnswersClarification(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := as("t1", "u1")
	tests := []struct {
		ask, reply, target string
	}{
		{"the code or the docs", "1", "#1"},
		{"the code or the docs", "2.", "#2"},
		{"hello there", "the archivalist", "archivalist"},
		{"hello there", "the code one", "librarian"},
		{"hello there", "where is the auth middleware", "librarian"},
		{"the cache", "what did we decide about it last week", "archivalist"},
	}
	for _, tt := range tests {
		s := f.createSession(t, ctx, "reply")
		asked := f.send(t, ctx, s, tt.ask)
		require.Empty(t, asked.GetRoute().GetTarget(), "%s is asked about", tt.ask)
		require.Contains(t, asked.GetReply(), "1. ")
		require.Contains(t, asked.GetReply(), "Reply with a number")
		want := tt.target
		if n, ok := strings.CutPrefix(want, "#"); ok {
			pending, err := f.svc.ListClarifications(ctx, &guidev1.ListClarificationsRequest{Parent: s.GetName()})
			require.NoError(t, err)
			require.Len(t, pending.GetClarifications(), 1)
			opts := pending.GetClarifications()[0].GetOptions()
			require.Len(t, opts, 2, "the plausible agents are offered")
			want = opts[map[string]int{"1": 0, "2": 1}[n]]
			require.Contains(t, asked.GetReply(), n+". ")
		}

		got := f.send(t, ctx, s, tt.reply)
		require.Equal(t, want, got.GetRoute().GetTarget(), "%q answers %q", tt.reply, tt.ask)
		require.Equal(t, tierClarification, got.GetRoute().GetTier())
		list, err := f.svc.ListClarifications(ctx, &guidev1.ListClarificationsRequest{Parent: s.GetName()})
		require.NoError(t, err)
		require.Empty(t, list.GetClarifications(), "the question is answered")
		evs := f.events(t, ctx, s, 0)
		require.Contains(t, eventTypes(evs), "clarification_answered")

		next := f.send(t, ctx, s, "where is the auth middleware")
		require.NotEqual(t, tierClarification, next.GetRoute().GetTier(), "an answered question takes no more replies")
	}

	// A slash command between the question and the reply leaves it pending.
	s := f.createSession(t, ctx, "status first")
	f.send(t, ctx, s, "hello there")
	f.send(t, ctx, s, "/help")
	got := f.send(t, ctx, s, "the code one")
	require.Equal(t, "librarian", got.GetRoute().GetTarget())
	require.Equal(t, tierClarification, got.GetRoute().GetTier())
}

// TestClarificationExpires: a question unanswered for the TTL is no longer
// pending, and a plain message after it is routed on its own.
func TestClarificationExpires(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := as("t1", "u1")
	s := f.createSession(t, ctx, "expiry")
	asked := f.send(t, ctx, s, "hello there")
	require.Empty(t, asked.GetRoute().GetTarget())
	list, err := f.svc.ListClarifications(ctx, &guidev1.ListClarificationsRequest{Parent: s.GetName()})
	require.NoError(t, err)
	require.Len(t, list.GetClarifications(), 1)
	name := list.GetClarifications()[0].GetName()

	later := time.Now().Add(f.svc.cfg.ClarificationTTL + time.Minute)
	f.svc.now = func() time.Time { return later }
	list, err = f.svc.ListClarifications(ctx, &guidev1.ListClarificationsRequest{Parent: s.GetName()})
	require.NoError(t, err)
	require.Empty(t, list.GetClarifications(), "expired")
	got := f.send(t, ctx, s, "where is the auth middleware")
	require.Equal(t, "librarian", got.GetRoute().GetTarget())
	require.NotEqual(t, tierClarification, got.GetRoute().GetTier())
	_, err = f.svc.SendMessage(ctx, &guidev1.SendMessageRequest{Parent: s.GetName(), Text: "1", InReplyTo: name})
	require.Error(t, err, "an expired question takes no answer")
}

func TestChoiceOf(t *testing.T) {
	t.Parallel()
	opts := []string{"librarian", "archivalist", "academic"}
	for reply, want := range map[string]string{
		"librarian": "librarian", "3": "academic", "the second one": "archivalist", "the code one": "librarian",
		"docs": "academic", "history please": "archivalist", "4": "", "code or docs": "",
		"where is the function that parses durations in the code": "",
	} {
		require.Equal(t, want, choiceOf(reply, opts), reply)
	}
}
