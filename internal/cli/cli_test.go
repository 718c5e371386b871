package cli

import (
	"bytes"
	"errors"
	"flag"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseTakesFlagsAnywhere(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		pos  []string
		json bool
	}{
		{"flags first", []string{"--json", "a", "b"}, []string{"a", "b"}, true},
		{"flags last", []string{"a", "b", "-json"}, []string{"a", "b"}, true},
		{"between", []string{"a", "--json", "b"}, []string{"a", "b"}, true},
		{"double dash ends flags", []string{"a", "--", "--json"}, []string{"a", "--json"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := &env{errw: &bytes.Buffer{}}
			fs := e.flags("sylk x", "", "")
			pos, err := parse(fs, tt.args)
			require.NoError(t, err)
			require.Equal(t, tt.pos, pos)
			require.Equal(t, tt.json, e.opts.json)
		})
	}
}

func TestExitCodes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status int
		code   int
	}{
		{http.StatusUnauthorized, ExitAuth},
		{http.StatusForbidden, ExitAuth},
		{http.StatusNotFound, ExitNotFound},
		{http.StatusGatewayTimeout, ExitTimeout},
		{http.StatusBadRequest, ExitError},
		{http.StatusInternalServerError, ExitError},
	}
	for _, tt := range tests {
		err := httpError(tt.status, []byte(`{"code":5,"message":"session not found"}`))
		require.Equal(t, tt.code, exitCode(err), "HTTP %d", tt.status)
		require.Contains(t, err.Error(), "session not found")
	}
	require.Equal(t, ExitOK, exitCode(nil))
	require.Equal(t, ExitError, exitCode(errors.New("x")))
	require.Equal(t, ExitUsage, exitCode(usageErrorf("x")))
}

func TestDispatchHelpAndUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"-h"}, {"runs", "-h"}, {"runs", "watch", "-h"}, {"keys", "create", "--help"}} {
		var out bytes.Buffer
		e := &env{out: &out, errw: &out, lookup: envOf(map[string]string{"SYLK_CONFIG": "/nonexistent/c.json"})}
		err := e.dispatch(commands(), "sylk", args)
		require.ErrorIs(t, err, flag.ErrHelp, "%v", args)
		require.Contains(t, out.String(), "Usage: sylk", "%v", args)
	}
	for _, args := range [][]string{{}, {"runs"}, {"runs", "nope"}, {"ask"}, {"runs", "watch"}} {
		e := &env{out: &bytes.Buffer{}, errw: &bytes.Buffer{}, lookup: envOf(map[string]string{"SYLK_CONFIG": "/nonexistent/c.json"})}
		require.Equal(t, ExitUsage, exitCode(e.dispatch(commands(), "sylk", args)), "%v", args)
	}
}
