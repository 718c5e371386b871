package worker

import (
	"fmt"
	"regexp"
	"strings"

	"sylk.dev/sylk/pkg/intent"
)

// Root-cause confidence of the corrections the Inspector and Tester send
// the Engineer (spec A-12): a finding that names a file and line points at
// its cause; a failing test says what broke, not why; anything else less.
const (
	rootCauseLocated = 0.85
	rootCauseTest    = 0.7
	rootCauseOther   = 0.55
)

var locatedFinding = regexp.MustCompile(`\S+:\d+`)

// gateCorrections runs each correction of a stage (role inspector or
// tester) through the feedback validation gate against the task's intent
// (spec A-12). Blocked corrections are not sent to the Engineer: they are
// kept as concerns in the task's report and said in the pipeline's log, and
// the Engineer is told only that they were withheld. The stage still
// fails, so that a finding the user's constraint rules out reaches the user
// (the pipeline's failure options) instead of passing silently. Flagged
// corrections are sent with their warning in front; passed ones as they
// are.
func (pr *pipelineRun) gateCorrections(role string, items []string, rootCause float64) []string {
	constraints, criteria := pr.spec.GetKeyConstraints(), pr.spec.GetSuccessCriteria()
	var out, blocked []string
	for _, it := range items {
		rc := rootCause
		if rc == rootCauseOther && locatedFinding.MatchString(it) {
			rc = rootCauseLocated
		}
		a := intent.Validate(constraints, criteria, intent.Correction{Issue: it, RootCauseConfidence: rc})
		pr.s.metrics.corrections.WithLabelValues(role, string(a.Decision)).Inc()
		switch a.Decision {
		case intent.Blocked:
			blocked = append(blocked, fmt.Sprintf("%s (%s)", it, a.Warning))
		case intent.Passed:
			out = append(out, it)
		default:
			out = append(out, fmt.Sprintf("[%s: %s] %s", a.Decision, a.Warning, it))
		}
	}
	if len(blocked) > 0 {
		fmt.Fprintf(&pr.log, "  %s: %d correction(s) blocked by the validation gate: %s\n", role, len(blocked), strings.Join(blocked, "; "))
		concern := fmt.Sprintf("%s corrections not applied because they contradict a key constraint: %s", role, strings.Join(blocked, "; "))
		if c := pr.report.Concerns; c != "" && !strings.EqualFold(c, "none") {
			concern = pr.report.Concerns + "; " + concern
		}
		pr.report.Concerns = concern
		out = append(out, fmt.Sprintf("%s: %d correction(s) withheld: acting on them would contradict the task's key constraints; "+
			"the user decides (skip the %s, or change the constraint)", role, len(blocked), role))
	}
	return out
}
