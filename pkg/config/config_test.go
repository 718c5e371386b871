package config

import (
	"flag"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseFillsFromEnv(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"SYLK_GRPC_LISTEN_ADDRESS": ":1234",
		"SYLK_SHUTDOWN_DELAY":      "3s",
		"SYLK_NAME":                "from-env",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	addr := fs.String("grpc.listen-address", ":9090", "")
	delay := fs.Duration("shutdown-delay", 0, "")
	name := fs.String("name", "", "")
	require.NoError(t, ParseWithLookup(fs, []string{"-name", "from-flag"}, lookup))
	require.Equal(t, ":1234", *addr)
	require.Equal(t, 3*time.Second, *delay)
	require.Equal(t, "from-flag", *name, "a flag given on the command line wins over the environment")
}

func TestParseNamesBadVariable(t *testing.T) {
	t.Parallel()
	lookup := func(k string) (string, bool) {
		if k == "SYLK_SHUTDOWN_DELAY" {
			return "soon", true
		}
		return "", false
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.Duration("shutdown-delay", 0, "")
	err := ParseWithLookup(fs, nil, lookup)
	require.ErrorContains(t, err, "SYLK_SHUTDOWN_DELAY")
}
