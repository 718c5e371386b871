//go:build faults

package faults

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// proc is a program the suite starts, stops and starts again: a store or a
// service. Its output goes to a log file of its own, which the suite prints
// the end of when a scenario fails.
type proc struct {
	name string
	argv []string
	env  []string
	log  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// newProc describes a program whose log is dir/name.log.
func newProc(dir, name string, env []string, argv ...string) *proc {
	return &proc{name: name, argv: argv, env: env, log: filepath.Join(dir, name+".log")}
}

// start starts the program, appending to its log.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("%s: log: %w", p.name, err)
	}
	fmt.Fprintf(f, "=== %s start %s\n", time.Now().UTC().Format(time.RFC3339Nano), p.name)
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = f, f
	// A group of its own: a signal the suite sends reaches the program
	// alone, never the test binary.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(done)
	}()
	p.cmd, p.done = cmd, done
	return nil
}

// running reports whether the program was started and has not exited.
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// stop sends sig and waits up to wait for the program to exit; then it
// kills it. It returns how long the exit took and whether it had to kill.
func (p *proc) stop(sig syscall.Signal, wait time.Duration) (time.Duration, bool) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return 0, false
	}
	begin := time.Now()
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
		return time.Since(begin), false
	case <-time.After(wait):
		_ = cmd.Process.Kill()
		<-done
		return time.Since(begin), true
	}
}

// tail is the last n bytes of the program's log.
func (p *proc) tail(n int) string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}

// freePort is a loopback TCP port that no one listened on a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// hostPort is 127.0.0.1:port.
func hostPort(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// waitFor polls cond every 50ms until it holds or timeout passes.
func waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}
