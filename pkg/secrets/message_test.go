package secrets

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/structpb"
)

func TestScrubMessage(t *testing.T) {
	t.Parallel()
	key := "ghp_" + rnd(80, alnum, 36)
	m, err := structpb.NewStruct(map[string]any{
		"out":    "token " + key,
		"nested": map[string]any{"list": []any{"plain", "also " + key}},
		"keep":   key,
	})
	require.NoError(t, err)
	require.Equal(t, 3, ScrubMessage(m))
	require.NotContains(t, m.String(), key)
	require.Contains(t, m.String(), "plain")
	require.Zero(t, ScrubMessage(nil))

	v := structpb.NewStringValue(key)
	require.Zero(t, ScrubMessage(v, "google.protobuf.Value.string_value"), "a kept field is left as it is")
	require.Equal(t, key, v.GetStringValue())
}
