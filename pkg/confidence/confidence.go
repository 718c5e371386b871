// Package confidence is the arithmetic of a request's confidence chain
// (spec ): every agent that routes, declines or answers a
// request appends its entry; the cumulative confidence is the product of
// the entries, named by a band with the action it suggests. The Guide and
// the agents share it so that an answer reads the same whoever publishes
// it; the requesting agent decides what to do, never the Guide.
package confidence

import (
	"slices"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
)

// Bands of a cumulative confidence.
const (
	BandHigh     = "high"
	BandGood     = "good"
	BandModerate = "moderate"
	BandLow      = "low"
	BandVeryLow  = "very_low"
)

// Actions a cumulative confidence suggests.
const (
	ActionProceed   = "proceed"
	ActionQueryMore = "query_more_agents"
	ActionConsider  = "consider_escalating"
	ActionEscalate  = "escalate"
)

// Cumulative is the product of a chain's confidences; 0 for no chain.
func Cumulative(chain []*messagev1.ConfidenceEntry) float64 {
	if len(chain) == 0 {
		return 0
	}
	p := 1.0
	for _, e := range chain {
		p *= e.GetConfidence()
	}
	return p
}

// Band names a cumulative confidence c and the action it suggests:
// 0.90+ high, 0.70 good, 0.50 moderate, 0.30 low, below very low; proceed
// from 0.65, query more agents from 0.50, consider escalating from 0.35,
// else escalate.
func Band(c float64) (band, action string) {
	switch {
	case c >= 0.9:
		band = BandHigh
	case c >= 0.7:
		band = BandGood
	case c >= 0.5:
		band = BandModerate
	case c >= 0.3:
		band = BandLow
	default:
		band = BandVeryLow
	}
	switch {
	case c >= 0.65:
		action = ActionProceed
	case c >= 0.5:
		action = ActionQueryMore
	case c >= 0.35:
		action = ActionConsider
	default:
		action = ActionEscalate
	}
	return band, action
}

// Append is chain with e appended, as a new slice (the envelope's own
// chain is left as it was). A nil e appends nothing.
func Append(chain []*messagev1.ConfidenceEntry, e *messagev1.ConfidenceEntry) []*messagev1.ConfidenceEntry {
	out := slices.Clone(chain)
	if e != nil {
		out = append(out, e)
	}
	return out
}

// Annotate sets a's chain, cumulative confidence, band and suggested
// action from chain.
func Annotate(a *messagev1.AgentAnswer, chain []*messagev1.ConfidenceEntry) {
	a.ConfidenceChain = chain
	a.CumulativeConfidence = Cumulative(chain)
	a.ConfidenceBand, a.SuggestedAction = Band(a.CumulativeConfidence)
}
