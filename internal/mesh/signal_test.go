package mesh

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSecondSignalEndsProcess runs signalContext in a child process: the
// first SIGTERM ends its context, and a second one ends the process
// instead of waiting for the shutdown the first began.
func TestSecondSignalEndsProcess(t *testing.T) {
	if os.Getenv("SYLK_TEST_SIGNAL_CHILD") == "1" {
		ctx, stop := signalContext()
		defer stop()
		fmt.Println("ready")
		<-ctx.Done()
		fmt.Println("stopping")
		// A shutdown that does not end: only a signal stops the process.
		_, _ = os.Stdin.Read(make([]byte, 1))
		os.Exit(0)
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestSecondSignalEndsProcess$")
	cmd.Env = append(os.Environ(), "SYLK_TEST_SIGNAL_CHILD=1")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	defer stdin.Close()
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	lines := bufio.NewScanner(out)
	require.True(t, lines.Scan())
	require.Equal(t, "ready", lines.Text())
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.True(t, lines.Scan())
	require.Equal(t, "stopping", lines.Text())
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	err = cmd.Wait()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "%v", err)
	ws := exit.Sys().(syscall.WaitStatus)
	require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGTERM, "ended by the second SIGTERM, not by the test's timeout: %v", err)
}
