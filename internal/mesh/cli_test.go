package mesh

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMainHelp: every command's -h prints help and exits 0, server and
// client commands alike; a missing service or an unknown command exits 2.
func TestMainHelp(t *testing.T) {
	t.Setenv("SYLK_CONFIG", t.TempDir()+"/config.json")
	for _, args := range [][]string{
		{"-h"}, {"help"}, {"serve", "-h"}, {"serve", "--help"}, {"healthcheck", "-h"},
		{"serve", "guide", "-h"}, {"serve", "gateway", "-h"}, {"healthcheck", "worker", "-h"},
		{"dev", "-h"}, {"migrate", "-h"}, {"create-api-key", "-h"}, {"list-api-keys", "-h"}, {"revoke-api-key", "-h"},
		{"login", "-h"}, {"ask", "-h"}, {"runs", "watch", "-h"}, {"keys", "-h"},
	} {
		var out, errb bytes.Buffer
		require.Equal(t, 0, Main(args, &out, &errb), "sylk %v: %s", args, errb.String())
		require.Contains(t, out.String()+errb.String(), "sylk", "sylk %v prints help", args)
	}
	for _, args := range [][]string{{}, {"serve"}, {"healthcheck"}, {"nope"}, {"runs"}} {
		var out, errb bytes.Buffer
		require.Equal(t, 2, Main(args, &out, &errb), "sylk %v", args)
	}
	var out bytes.Buffer
	require.Equal(t, 0, Main([]string{"-h"}, &out, &out))
	require.Contains(t, out.String(), "Server commands:")
	require.Contains(t, out.String(), "Client commands")
}
