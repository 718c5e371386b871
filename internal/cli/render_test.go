package cli

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
)

func answered(a *messagev1.AgentAnswer) *eventv1.Event {
	return &eventv1.Event{Type: eventv1.EventType_EVENT_TYPE_MESSAGE_ANSWERED, Source: a.GetAgent(),
		Payload: &eventv1.Event_MessageAnswered{MessageAnswered: a}}
}

func TestRenderAnswer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ev   *eventv1.Event
		want string
	}{
		{"cited", answered(&messagev1.AgentAnswer{Agent: "librarian", Text: "It is in billing/invoice.go [1].",
			Model: "scripted/m", GroundingRatio: 1, Confidence: &messagev1.ConfidenceEntry{Confidence: 0.9},
			Citations: []*messagev1.Citation{{Name: "repositories/r1", Path: "billing/invoice.go", LineStart: 3, LineEnd: 10, Revision: "0123456789abcdef"}}}),
			"It is in billing/invoice.go [1].\n\nSources:\n  [1] billing/invoice.go:3-10 (@ 0123456789ab)\n\n" +
				"answered by the librarian · confidence 0.90 · grounding 100%\n"},
		{"hits without citations", answered(&messagev1.AgentAnswer{Agent: "librarian", Text: "2 matches.",
			Hits: []*messagev1.Hit{{Path: "a.go", LineStart: 1, LineEnd: 4, Symbol: "A"}, {Path: "b.go", LineStart: 7}}}),
			"2 matches.\n\nFound:\n  [1] a.go:1-4 A\n  [2] b.go:7\n\nanswered by the librarian\n"},
		{"guide reply", answered(&messagev1.AgentAnswer{Agent: "guide", Text: "Commands: /status"}), "Commands: /status\n"},
		{"cannot help", answered(&messagev1.AgentAnswer{Agent: "academic", CannotHelp: true, CannotHelpReason: "no documents", SuggestedTarget: "librarian"}),
			"The academic could not help: no documents\nTry asking the librarian.\n"},
		{"clarification", &eventv1.Event{Type: eventv1.EventType_EVENT_TYPE_CLARIFICATION_REQUESTED, Text: "Who should answer?",
			Payload: &eventv1.Event_ClarificationRequested{ClarificationRequested: &eventv1.ClarificationRequested{Options: []string{"librarian", "architect"}}}},
			"? Who should answer?\n  1) librarian\n  2) architect\n"},
		{"routed", &eventv1.Event{Type: eventv1.EventType_EVENT_TYPE_MESSAGE_ROUTED,
			Payload: &eventv1.Event_MessageRouted{MessageRouted: &eventv1.MessageRouted{Target: "librarian", IntentType: "LOCATE", Confidence: 0.95}}},
			"→ librarian (LOCATE, confidence 0.95)\n"},
		{"other event", &eventv1.Event{Type: eventv1.EventType_EVENT_TYPE_RUN_STARTED, Text: "Run started"}, "· Run started\n"},
		{"received is not echoed", &eventv1.Event{Type: eventv1.EventType_EVENT_TYPE_MESSAGE_RECEIVED, Text: "hi"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var b bytes.Buffer
			renderEvent(&b, tt.ev)
			require.Equal(t, tt.want, b.String())
		})
	}
}

func TestChatReplyAnswersTheClarification(t *testing.T) {
	t.Parallel()
	ch := &chat{pending: &eventv1.ClarificationRequested{Clarification: "sessions/s/clarifications/c", Options: []string{"librarian", "architect"}}}
	text, to := ch.reply("2")
	require.Equal(t, "architect", text)
	require.Equal(t, "sessions/s/clarifications/c", to)
	text, to = ch.reply("the code search one")
	require.Equal(t, "the code search one", text)
	require.Equal(t, "sessions/s/clarifications/c", to)
	ch.pending = nil
	text, to = ch.reply("2")
	require.Equal(t, "2", text)
	require.Empty(t, to)
}

func TestProgressLine(t *testing.T) {
	t.Parallel()
	m := &librarianv1.IndexOperationMetadata{Phase: librarianv1.IndexPhase_INDEX_PHASE_LEXICAL, FilesTotal: 40, FilesDone: 10, ChunksDone: 55}
	require.Equal(t, "lexical   [#######.......................] 10/40 files, 55 chunks", progressLine(m))
	m = &librarianv1.IndexOperationMetadata{Phase: librarianv1.IndexPhase_INDEX_PHASE_SEMANTIC, FilesTotal: 40, FilesDone: 40, ChunksDone: 30, ChunksTotal: 60}
	require.Equal(t, "semantic  [###############...............] 30/60 chunks embedded", progressLine(m))

	var b bytes.Buffer
	p := newProgress(&b, false)
	p.update(m)
	p.update(m)
	p.done()
	require.Equal(t, progressLine(m)+"\n", b.String(), "off a terminal, one line per phase")
}
