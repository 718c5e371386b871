package e2e

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/internal/mesh"
	"sylk.dev/sylk/pkg/testenv"
)

// TestDevProcess builds the real sylk binary, runs `sylk dev` as a process,
// uses the printed address and key, and stops it with SIGTERM.
func TestDevProcess(t *testing.T) {
	// As make dev does: sylk-task-init beside sylk, so that task commands
	// run in namespaces of their own (a root worker refuses to run them
	// without).
	dir := t.TempDir()
	bin := filepath.Join(dir, "sylk")
	build := exec.Command("go", "build", "-o", dir+"/", "sylk.dev/sylk/cmd/sylk", "sylk.dev/sylk/cmd/sylk-task-init")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)

	id := testenv.ID()
	prefix := "e2p" + id + "_"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "dev",
		"-gateway.listen-address", "127.0.0.1:0",
		"-postgres.schema-prefix", prefix,
		"-redis.prefix", "sylktest:"+id,
		"-nats.data-dir", t.TempDir(), // embedded NATS
		"-log.level", "warn",
	)
	cmd.Env = append(cmd.Environ(), "SYLK_POSTGRES_DSN="+testenv.PostgresDSN(), "SYLK_REDIS_URL="+testenv.RedisURL())
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { dropSchemas(t, prefix) })

	var base, key, natsURL string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && (base == "" || key == "" || natsURL == "") {
		f := strings.Fields(sc.Text())
		if len(f) >= 3 && f[0] == "REST" {
			base = f[2]
		}
		if len(f) >= 3 && f[0] == "API" && f[1] == "key:" {
			key = f[2]
		}
		if len(f) >= 2 && f[0] == "NATS:" {
			natsURL = f[1]
		}
	}
	require.NotEmpty(t, base, "sylk dev printed no REST address")
	require.NotEmpty(t, key, "sylk dev printed no API key")

	// The embedded NATS server takes only clients with the token the
	// printed URL holds.
	u, err := url.Parse(natsURL)
	require.NoError(t, err, natsURL)
	require.NotNil(t, u.User, "the NATS URL holds the token")
	nc, err := nats.Connect(natsURL)
	require.NoError(t, err)
	nc.Close()
	u.User = nil
	_, err = nats.Connect(u.String())
	require.ErrorIs(t, err, nats.ErrAuthorization)
	go func() { _, _ = io.Copy(io.Discard, stdout) }()

	c := &client{t: t, base: base, key: key, http: &http.Client{Timeout: 10 * time.Second}}
	sess := c.ok("POST", "/v1/sessions", map[string]any{})["session"].(map[string]any)
	reply := c.ok("POST", "/v1/"+sess["name"].(string)+"/messages", map[string]any{"text": "/status"})
	require.NotEmpty(t, reply["reply"])

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), "sylk dev exits cleanly on SIGTERM; its log:\n%s", stderr.String())
	require.Equal(t, 0, cmd.ProcessState.ExitCode())
	_ = mesh.Version
}
