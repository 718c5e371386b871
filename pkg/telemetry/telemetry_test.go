package telemetry

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// A sample ratio outside 0..1 and an endpoint given as a URL are refused at
// start, not clamped or reported later by the exporter.
func TestValidate(t *testing.T) {
	require.NoError(t, Config{SampleRatio: 1}.Validate())
	require.NoError(t, Config{Endpoint: "collector:4317", SampleRatio: 0.25}.Validate())
	require.NoError(t, Config{Endpoint: "[::1]:4317", SampleRatio: 0}.Validate())
	for _, c := range []Config{
		{SampleRatio: -0.1}, {SampleRatio: 1.5}, {SampleRatio: math.NaN()},
		{Endpoint: "http://collector:4317", SampleRatio: 1}, {Endpoint: "collector", SampleRatio: 1},
		{Endpoint: "collector:", SampleRatio: 1},
	} {
		require.Error(t, c.Validate(), "%+v", c)
	}
}
