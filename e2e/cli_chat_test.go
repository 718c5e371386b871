package e2e

import (
	"context"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/stretchr/testify/require"
)

// testCLIChat drives sylk chat through a pseudo-terminal, as a person at a
// terminal would: a question, its answer, Ctrl-C at the prompt, a slash
// command, /quit.
func testCLIChat(t *testing.T, s *sylkCLI) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.bin, "chat")
	cmd.Env = s.env
	tty, err := pty.Start(cmd)
	require.NoError(t, err)
	defer tty.Close()
	var screen syncBuffer
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(&screen, tty) // ends with EIO once the program exits
	}()
	// expect waits until the screen shows want after the first from bytes,
	// and returns where it ends.
	expect := func(from int, want string) int {
		t.Helper()
		var at int
		require.Eventually(t, func() bool {
			out := screen.String()
			if from > len(out) {
				return false
			}
			i := strings.Index(out[from:], want)
			at = from + i + len(want)
			return i >= 0
		}, 2*time.Minute, 20*time.Millisecond, "the chat shows %q; screen:\n%s", want, screen.String())
		return at
	}
	send := func(line string) {
		t.Helper()
		_, err := tty.WriteString(line)
		require.NoError(t, err)
	}

	pos := expect(0, "/help lists the commands")
	pos = expect(pos, "> ")
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

	err = cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		t.Fatalf("sylk chat exited %d; screen:\n%s", ee.ExitCode(), screen.String())
	}
	require.NoError(t, err)
	<-copied
}
