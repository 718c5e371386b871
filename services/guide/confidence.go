package guide

import (
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/confidence"
)

// CumulativeConfidence is the product of a confidence chain (spec A-05;
// pkg/confidence, which the agents use too).
func CumulativeConfidence(chain []*messagev1.ConfidenceEntry) float64 {
	return confidence.Cumulative(chain)
}

// ConfidenceBand names a cumulative confidence (spec A-05) and the
// suggested action; the requesting agent decides.
func ConfidenceBand(c float64) (band, action string) { return confidence.Band(c) }
