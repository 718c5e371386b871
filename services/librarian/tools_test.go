package librarian

import (
	"testing"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/tooldetect"
)

// The priorities are tested in pkg/tooldetect; here the API's form and its
// warnings.
func TestDiscoverWarnings(t *testing.T) {
	t.Parallel()
	installed := func(p string) bool { return p == "gofmt" || p == "go" }
	resp := discover(tooldetect.NewFacts(map[string]string{"go.mod": ""}), installed)
	require.Equal(t, "goimports", resp.GetFormatters()[0].GetId())
	require.Equal(t, []string{"gofmt"}, []string{resp.GetAlternatives()[0].GetId()})
	require.True(t, resp.GetTestFrameworks()[0].GetInstalled())
	require.Contains(t, resp.GetWarnings(), "goimports (goimports) is not installed on the librarian's PATH")
	empty := discover(tooldetect.NewFacts(nil), installed)
	require.Contains(t, empty.GetWarnings(), "no source files of a known language were found")
}
