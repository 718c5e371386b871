package worker

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// execSpec is one command to run.
type execSpec struct {
	Command     string
	Dir         string
	Env         []string
	Timeout     time.Duration
	KillGrace   time.Duration
	OutputLimit int
}

// execResult is what running a command produced.
type execResult struct {
	// ExitCode is the command's status; 128+N when signal N ended it; -1
	// when it could not start.
	ExitCode int
	Stdout   *capture
	Stderr   *capture
	Duration time.Duration
	TimedOut bool
	// Cancelled is set when ctx ended before the command did.
	Cancelled bool
	// StartErr is set when the command could not be started.
	StartErr error
}

// outputDrain bounds how long output is still read after the command ended,
// in case a process that left the group keeps a pipe open.
const outputDrain = 2 * time.Second

// execute runs spec.Command with /bin/sh -c in its own process group. On
// timeout or when ctx ends it sends SIGTERM to the group, then SIGKILL after
// spec.KillGrace. Whatever the command leaves running in its group is killed
// once the shell has exited.
func execute(ctx context.Context, spec execSpec) execResult {
	res := execResult{Stdout: newCapture(spec.OutputLimit), Stderr: newCapture(spec.OutputLimit)}
	outR, outW, err := os.Pipe()
	if err != nil {
		return failedStart(res, err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(outR, outW)
		return failedStart(res, err)
	}
	cmd := exec.Command("/bin/sh", "-c", spec.Command)
	cmd.Dir = spec.Dir
	cmd.Env = spec.Env
	cmd.Stdout = outW
	cmd.Stderr = errW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	start := time.Now()
	err = cmd.Start()
	// The child holds its own copies of the write ends; the reads below end
	// when every process writing to them is gone.
	closeAll(outW, errW)
	if err != nil {
		closeAll(outR, errR)
		return failedStart(res, err)
	}
	var readers sync.WaitGroup
	readers.Go(func() { _, _ = io.Copy(res.Stdout, outR) })
	readers.Go(func() { _, _ = io.Copy(res.Stderr, errR) })

	pgid := cmd.Process.Pid
	waitCh := make(chan error, 1)
	go func() { waitCh <- cmd.Wait() }()
	timer := time.NewTimer(spec.Timeout)
	defer timer.Stop()
	var werr error
	select {
	case werr = <-waitCh:
	case <-timer.C:
		res.TimedOut = true
		werr = stopGroup(pgid, waitCh, spec.KillGrace)
	case <-ctx.Done():
		res.Cancelled = true
		werr = stopGroup(pgid, waitCh, spec.KillGrace)
	}
	res.Duration = time.Since(start)
	// Orphans: background processes the command started and left behind.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	deadline := time.Now().Add(outputDrain)
	_ = outR.SetReadDeadline(deadline)
	_ = errR.SetReadDeadline(deadline)
	readers.Wait()
	closeAll(outR, errR)
	res.ExitCode = exitCode(werr)
	return res
}

// stopGroup sends SIGTERM to the process group, then SIGKILL if the shell
// has not exited after grace, and returns the shell's wait error.
func stopGroup(pgid int, waitCh <-chan error, grace time.Duration) error {
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case err := <-waitCh:
		return err
	case <-t.C:
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	return <-waitCh
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return -1
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ee.ExitCode()
}

func failedStart(res execResult, err error) execResult {
	res.ExitCode = -1
	res.StartErr = err
	return res
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}
