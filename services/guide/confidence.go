package guide

import (
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
)

// CumulativeConfidence is the product of a confidence chain (spec A-05).
func CumulativeConfidence(chain []*messagev1.ConfidenceEntry) float64 {
	if len(chain) == 0 {
		return 0
	}
	p := 1.0
	for _, e := range chain {
		p *= e.GetConfidence()
	}
	return p
}

// ConfidenceBand names a cumulative confidence (spec A-05) and the
// suggested action; the requesting agent decides.
func ConfidenceBand(c float64) (band, action string) {
	switch {
	case c >= 0.9:
		band = "high"
	case c >= 0.7:
		band = "good"
	case c >= 0.5:
		band = "moderate"
	case c >= 0.3:
		band = "low"
	default:
		band = "very_low"
	}
	switch {
	case c >= 0.65:
		action = "proceed"
	case c >= 0.5:
		action = "query_more_agents"
	case c >= 0.35:
		action = "consider_escalating"
	default:
		action = "escalate"
	}
	return band, action
}
