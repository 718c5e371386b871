package e2e

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/toolexec"
)

// testCLIChat drives sylk chat through a pseudo-terminal, as a person at a
// terminal would: a question, its answer, Ctrl-C at the prompt, a slash
// command, /quit.
func testCLIChat(t *testing.T, s *sylkCLI) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd, tty := startOnTerminal(ctx, t, s, "chat")
	defer tty.Close()
	var screen syncBuffer
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(&screen, tty) // ends with EIO once the program exits
	}()
	// expect waits until the screen shows want after the first from bytes,
	// and returns where it ends. It fails at once when the program has
	// ended without showing it.
	expect := func(from int, want string) int {
		t.Helper()
		// Set by the condition, which runs in a goroutine of its own.
		var at atomic.Int64
		var ended atomic.Bool
		at.Store(-1)
		assert.Eventually(t, func() bool {
			select {
			case <-copied:
				ended.Store(true)
			default:
			}
			out := screen.String()
			if i := strings.Index(out[min(from, len(out)):], want); i >= 0 {
				at.Store(int64(min(from, len(out)) + i + len(want)))
				return true
			}
			return ended.Load()
		}, 2*time.Minute, 20*time.Millisecond, "the chat shows %q", want)
		require.GreaterOrEqual(t, at.Load(), int64(0), "sylk chat did not show %q (ended: %t); screen:\n%s", want, ended.Load(), screen.String())
		return int(at.Load())
	}
	send := func(line string) {
		t.Helper()
		_, err := tty.WriteString(line)
		require.NoError(t, err)
	}

	pos := expect(0, "/help lists the commands")
	pos = expect(pos, "> ")
	// The mesh's worker sweeps this process's adopted processes every
	// second while it has run commands; one sweep here, mid-conversation,
	// must leave the chat alone (see startOnTerminal).
	toolexec.SweepOrphans()
	send("where is the function ComputeInvoiceTotal defined in the code?\n")
	pos = expect(pos, "→ librarian")
	pos = expect(pos, "billing/invoice.go:3-10")
	pos = expect(pos, "answered by the librarian")
	pos = expect(pos, "> ")

	// Ctrl-C at the prompt does not end the program.
	send("\x03")
	pos = expect(pos, "Ctrl-D or /quit leaves")
	send("/session\n")
	pos = expect(pos, "Session sessions/")
	send("/help\n")
	pos = expect(pos, "/repo ID")
	send("/quit\n")

	err := cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		t.Fatalf("sylk chat exited %d; screen:\n%s", ee.ExitCode(), screen.String())
	}
	require.NoError(t, err)
	<-copied
}

// startOnTerminal starts sylk args on a new pseudo-terminal, as its
// controlling terminal (so Ctrl-C reaches it), and returns the terminal's
// master side.
//
// The program is not this process's child: the mesh runs in this process,
// and its worker makes this process adopt orphaned processes and kill, at
// each sweep, those of its children in a session of their own that no live
// run can own (pkg/toolexec/orphans.go). A child started on the terminal
// directly (pty.Start: setsid, then the terminal as its controlling one) is
// such a child, and was stopped and killed at random points of the
// conversation. setsid(1) stays in this process's session, forks the
// program into a session of its own and waits for it, with its exit code.
func startOnTerminal(ctx context.Context, t *testing.T, s *sylkCLI, args ...string) (*exec.Cmd, *os.File) {
	t.Helper()
	cmd := exec.CommandContext(ctx, "setsid", append([]string{"--fork", "--wait", "--ctty", s.bin}, args...)...)
	cmd.Env = s.env
	tty, err := pty.StartWithAttrs(cmd, nil, &syscall.SysProcAttr{})
	require.NoError(t, err)
	return cmd, tty
}
