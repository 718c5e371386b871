package mesh

import (
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/config"
)

func parseDev(t *testing.T, args []string, env map[string]string) DevConfig {
	t.Helper()
	fs := flag.NewFlagSet("sylk dev", flag.ContinueOnError)
	var cfg DevConfig
	cfg.RegisterFlags(fs)
	require.NoError(t, config.ParseWithLookup(fs, args, func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}))
	return cfg
}

func TestDevDefaults(t *testing.T) {
	cfg := parseDev(t, nil, nil)
	assert.Empty(t, cfg.NATS.URL, "NATS is embedded unless a URL is given")
	assert.Equal(t, "127.0.0.1:8080", cfg.Services.Gateway.ListenAddress)
	assert.Equal(t, "127.0.0.1:0", cfg.Server.ListenAddress)
	assert.EqualValues(t, 4, cfg.Postgres.MaxConns)
	home, err := os.UserHomeDir()
	require.NoError(t, err)
	cwd, err := os.Getwd()
	require.NoError(t, err)
	assert.Subset(t, cfg.Services.Librarian.AllowedRoots.All, []string{home, cwd}, "your home and the current directory")
	assert.Empty(t, cfg.Services.Librarian.AllowedRoots.Tenants)

	var serve ServiceConfigs
	serve.RegisterFlags(flag.NewFlagSet("sylk serve", flag.ContinueOnError), allModules()...)
	assert.True(t, serve.Librarian.AllowedRoots.Empty(), "sylk serve registers no paths until roots are set")
}

// The dev defaults must not hide the SYLK_* variables the README names.
func TestDevEnvironmentOverridesDefaults(t *testing.T) {
	cfg := parseDev(t, nil, map[string]string{
		"SYLK_NATS_URL":               "nats://127.0.0.1:4222",
		"SYLK_GATEWAY_LISTEN_ADDRESS": "127.0.0.1:8181",
		"SYLK_POSTGRES_MAX_CONNS":     "9",
	})
	assert.Equal(t, "nats://127.0.0.1:4222", cfg.NATS.URL)
	assert.Equal(t, "127.0.0.1:8181", cfg.Services.Gateway.ListenAddress)
	assert.EqualValues(t, 9, cfg.Postgres.MaxConns)

	cfg = parseDev(t, []string{"-nats.url", "nats://flag:4222"}, map[string]string{"SYLK_NATS_URL": "nats://env:4222"})
	assert.Equal(t, "nats://flag:4222", cfg.NATS.URL, "a flag wins over its variable")
}

// -h prints each flag's DefValue: it must be the default dev uses.
func TestDevHelpShowsDevDefaults(t *testing.T) {
	fs := flag.NewFlagSet("sylk dev", flag.ContinueOnError)
	var cfg DevConfig
	cfg.RegisterFlags(fs)
	for name, want := range map[string]string{
		"nats.url":               "",
		"gateway.listen-address": "127.0.0.1:8080",
		"grpc.listen-address":    "127.0.0.1:0",
		"http.listen-address":    "127.0.0.1:0",
		"postgres.max-conns":     "4",
	} {
		assert.Equal(t, want, fs.Lookup(name).DefValue, name)
	}
}

// A service started on its own refuses to run without the internal key
// (unless told to take unsigned identities), before it connects anywhere.
func TestServeNeedsInternalKey(t *testing.T) {
	t.Setenv("SYLK_INTERNAL_KEY", "")
	t.Setenv("SYLK_INTERNAL_KEY_FILE", "")
	t.Setenv("SYLK_INTERNAL_ALLOW_UNSIGNED", "false")
	var stderr strings.Builder
	err := Serve(t.Context(), Academic, []string{"-postgres.dsn", "postgres://nowhere.invalid/x", "-log.level", "error"}, &stderr)
	require.ErrorContains(t, err, "no internal key: set SYLK_INTERNAL_KEY")
	err = Serve(t.Context(), Academic, []string{"-internal.key", "short"}, &stderr)
	require.ErrorContains(t, err, "internal.key: must have at least 32 bytes")
	require.NotContains(t, err.Error(), "short\"")
}

// The services that check sessions through the Guide need its address.
func TestPeersRequired(t *testing.T) {
	t.Parallel()
	require.ErrorContains(t, PeerConfig{}.required(mustLookup(t, Orchestrator)), "orchestrator needs -peer.guide (env SYLK_PEER_GUIDE)")
	err := PeerConfig{}.required(mustLookup(t, Architect))
	require.ErrorContains(t, err, "architect needs -peer.orchestrator")
	require.ErrorContains(t, err, "architect needs -peer.guide")
	require.NoError(t, PeerConfig{Guide: "guide:9090"}.required(mustLookup(t, Orchestrator)))
	require.NoError(t, PeerConfig{}.required(mustLookup(t, Librarian)))
}

// The peer flags and their variables fill PeerConfig by module name.
func TestPeerFlags(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var p PeerConfig
	p.RegisterFlags(fs)
	require.NoError(t, config.ParseWithLookup(fs, []string{"-peer.guide", "g:1"}, func(k string) (string, bool) {
		return map[string]string{"SYLK_PEER_ACADEMIC": "a:2"}[k], k == "SYLK_PEER_ACADEMIC"
	}))
	require.Equal(t, PeerConfig{Guide: "g:1", Academic: "a:2"}, p)
	require.Nil(t, fs.Lookup("peer."+Worker), "no one calls the worker")
	require.Equal(t, "", fs.Lookup("peer."+Librarian).DefValue)
}

func mustLookup(t *testing.T, name string) *module {
	t.Helper()
	m, err := lookup(name)
	require.NoError(t, err)
	return m
}
