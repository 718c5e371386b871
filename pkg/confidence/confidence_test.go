package confidence

import (
	"testing"

	"github.com/stretchr/testify/require"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
)

// The spec's example: 0.95 × 0.88 × 0.72 ≈ 0.60, moderate, query
// more agents.
func TestChain(t *testing.T) {
	chain := []*messagev1.ConfidenceEntry{{Agent: "guide", Confidence: 0.95}, {Agent: "librarian", Confidence: 0.88}}
	longer := Append(chain, &messagev1.ConfidenceEntry{Agent: "academic", Confidence: 0.72})
	require.Len(t, chain, 2, "the envelope's chain is left as it was")
	require.Len(t, Append(chain, nil), 2)
	a := &messagev1.AgentAnswer{}
	Annotate(a, longer)
	require.InDelta(t, 0.95*0.88*0.72, a.GetCumulativeConfidence(), 1e-9)
	require.Equal(t, BandModerate, a.GetConfidenceBand())
	require.Equal(t, ActionQueryMore, a.GetSuggestedAction())
	require.Len(t, a.GetConfidenceChain(), 3)
	require.Zero(t, Cumulative(nil))
}

func TestBand(t *testing.T) {
	for _, tt := range []struct {
		c            float64
		band, action string
	}{
		{0.95, BandHigh, ActionProceed}, {0.9, BandHigh, ActionProceed}, {0.7, BandGood, ActionProceed},
		{0.65, BandModerate, ActionProceed}, {0.5, BandModerate, ActionQueryMore}, {0.49, BandLow, ActionConsider},
		{0.35, BandLow, ActionConsider}, {0.3, BandLow, ActionEscalate}, {0.1, BandVeryLow, ActionEscalate},
	} {
		band, action := Band(tt.c)
		require.Equal(t, tt.band, band, tt.c)
		require.Equal(t, tt.action, action, tt.c)
	}
}
