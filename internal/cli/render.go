package cli

import (
	"fmt"
	"io"
	"strings"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
)

// maxHitsShown bounds the search results listed under an answer that has
// no citations.
const maxHitsShown = 5

// renderEvent writes one event of an exchange for a person. Answers and
// clarifications get their own layout; other events a line.
func renderEvent(w io.Writer, ev *eventv1.Event) {
	switch ev.GetType() {
	case eventv1.EventType_EVENT_TYPE_MESSAGE_RECEIVED:
		// The user's own words: not echoed.
	case eventv1.EventType_EVENT_TYPE_MESSAGE_ROUTED:
		r := ev.GetMessageRouted()
		fmt.Fprintf(w, "→ %s (%s, confidence %.2f)\n", r.GetTarget(), orDash(r.GetIntentType()), r.GetConfidence())
	case eventv1.EventType_EVENT_TYPE_MESSAGE_REROUTED:
		r := ev.GetMessageRerouted()
		fmt.Fprintf(w, "↪ %s declined, asking %s: %s\n", r.GetFrom(), r.GetTo(), r.GetReason())
	case eventv1.EventType_EVENT_TYPE_MESSAGE_ANSWERED:
		renderAnswer(w, ev)
	case eventv1.EventType_EVENT_TYPE_CLARIFICATION_REQUESTED:
		renderClarification(w, ev)
	case eventv1.EventType_EVENT_TYPE_PLAN_AWAITING_APPROVAL:
		p := ev.GetPlan()
		fmt.Fprintf(w, "Plan %q (%d steps) waits for approval: sylk plans show %s\n", p.GetTitle(), p.GetNodes(), p.GetPlan())
	default:
		if t := strings.TrimSpace(ev.GetText()); t != "" {
			fmt.Fprintf(w, "· %s\n", t)
		}
	}
}

// renderAnswer writes an answer's text, then the sources it cites (or,
// without citations, the best search results), then who answered and how
// sure it is.
func renderAnswer(w io.Writer, ev *eventv1.Event) {
	a := ev.GetMessageAnswered()
	text := strings.TrimSpace(a.GetText())
	if text == "" {
		text = strings.TrimSpace(ev.GetText())
	}
	if a.GetCannotHelp() {
		fmt.Fprintf(w, "The %s could not help: %s\n", orDash(a.GetAgent()), orDash(a.GetCannotHelpReason()))
		if t := a.GetSuggestedTarget(); t != "" {
			fmt.Fprintf(w, "Try asking the %s.\n", t)
		}
		return
	}
	fmt.Fprintln(w, text)
	switch {
	case len(a.GetCitations()) > 0:
		fmt.Fprintln(w, "\nSources:")
		for i, c := range a.GetCitations() {
			fmt.Fprintf(w, "  [%d] %s\n", i+1, citation(c))
		}
	case len(a.GetHits()) > 0:
		fmt.Fprintln(w, "\nFound:")
		for i, h := range a.GetHits() {
			if i == maxHitsShown {
				fmt.Fprintf(w, "  … and %d more\n", len(a.GetHits())-i)
				break
			}
			fmt.Fprintf(w, "  [%d] %s\n", i+1, hit(h))
		}
	}
	if line := answerFooter(ev.GetSource(), a); line != "" {
		fmt.Fprintf(w, "\n%s\n", line)
	}
}

// answerFooter says who answered, with what confidence and grounding.
func answerFooter(source string, a *messagev1.AgentAnswer) string {
	var parts []string
	if who := firstNonEmpty(a.GetAgent(), source); who != "" && who != "guide" {
		parts = append(parts, "answered by the "+who)
	}
	if a.GetCached() {
		parts = append(parts, "from the cache")
	}
	if c := a.GetConfidence().GetConfidence(); c > 0 {
		parts = append(parts, fmt.Sprintf("confidence %.2f", c))
	}
	if a.GetModel() != "" && len(a.GetCitations()) > 0 {
		parts = append(parts, fmt.Sprintf("grounding %.0f%%", 100*a.GetGroundingRatio()))
	}
	if a.GetUngrounded() {
		parts = append(parts, "some citations failed verification and were dropped")
	}
	if r := a.GetRevision(); r != "" {
		parts = append(parts, "at "+short(r))
	}
	return strings.Join(parts, " · ")
}

// citation is "path:start-end (title @ revision)".
func citation(c *messagev1.Citation) string {
	var b strings.Builder
	b.WriteString(firstNonEmpty(c.GetPath(), c.GetTitle(), c.GetName()))
	b.WriteString(lines(c.GetLineStart(), c.GetLineEnd()))
	var extra []string
	if c.GetHeading() != "" {
		extra = append(extra, c.GetHeading())
	}
	if c.GetPath() != "" && c.GetTitle() != "" && c.GetTitle() != c.GetPath() {
		extra = append(extra, c.GetTitle())
	}
	if c.GetRevision() != "" {
		extra = append(extra, "@ "+short(c.GetRevision()))
	}
	if len(extra) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(extra, " "))
	}
	return b.String()
}

// hit is "path:start-end symbol".
func hit(h *messagev1.Hit) string {
	s := firstNonEmpty(h.GetPath(), h.GetTitle(), h.GetName()) + lines(h.GetLineStart(), h.GetLineEnd())
	if h.GetSymbol() != "" {
		s += " " + h.GetSymbol()
	}
	return s
}

// renderClarification writes the question and its numbered choices.
func renderClarification(w io.Writer, ev *eventv1.Event) {
	q := ev.GetClarificationRequested()
	fmt.Fprintf(w, "? %s\n", firstNonEmpty(strings.TrimSpace(ev.GetText()), q.GetContext(), "Which did you mean?"))
	for i, o := range q.GetOptions() {
		fmt.Fprintf(w, "  %d) %s\n", i+1, o)
	}
}

func lines(start, end int32) string {
	switch {
	case start <= 0:
		return ""
	case end > start:
		return fmt.Sprintf(":%d-%d", start, end)
	default:
		return fmt.Sprintf(":%d", start)
	}
}

// short is a commit's first 12 characters.
func short(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

func orDash(s string) string { return firstNonEmpty(s, "-") }
