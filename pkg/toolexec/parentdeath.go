package toolexec

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"

	"sylk.dev/sylk/pkg/taskinit"
)

// Commands end with the executor's process. Should it die without
// stopping them (kill -9, a crash, the out-of-memory killer), nothing of a
// command it started may run on, re-parented to the system's init and
// still writing its workspace:
//   - in namespaces of their own, the init program has a parent-death
//     signal (SIGKILL) and is the PID namespace's first process: its end
//     kills every process of the namespace;
//   - without, the command is started through the same program as a
//     reaper (taskinit.Spec.Reaper) when it is found: on its parent's
//     death it kills the command's process group and every process below
//     it;
//   - without namespaces nor the program, the command itself gets SIGKILL
//     as its parent-death signal; what it started in the background is
//     left to the cgroup and orphan sweeps of the executor's next start
//     (removeAbandonedCgroups, sweepDeadOwners).
//
// The kernel sends the parent-death signal when the thread that started
// the process ends, not the process (go.dev/issue/27505), and the Go
// runtime ends a thread whose goroutine exits locked to it. So each command
// is started from a goroutine locked to an OS thread, which then waits for
// it: the thread outlives it. A thread a confined start restricted is never
// unlocked, and ends after the command; any other goes back to the runtime
// once the command has ended.

// findReaper sets the executor's reaper program: the task init program,
// for commands started without namespaces.
func (e *Executor) findReaper() {
	if e.ns != nil {
		return
	}
	p, err := findTaskInit(e.cfg.TaskInit)
	if err != nil {
		e.noReaper = err
		return
	}
	// A confined command's reaper is started after the confinement: it
	// must lie where commands may read.
	if e.Confined() {
		if rp := resolved(p); hiddenRelation(rp, e.hidden) == relHidden {
			e.noReaper = fmt.Errorf("%s is in a directory task commands may not read (the workspace root, or -toolexec.confine-hidden): put it beside sylk or name another with -toolexec.task-init", p)
			return
		}
	}
	e.reaper = p
}

// EndsWithProcess reports whether everything a command starts ends when
// this process dies, and, when only the command itself does, why.
func (e *Executor) EndsWithProcess() (bool, error) {
	if e.ns != nil || e.reaper != "" {
		return true, nil
	}
	if e.noReaper != nil {
		return false, fmt.Errorf("only a command's first process ends with the service: %w", e.noReaper)
	}
	return false, errors.New("only a command's first process ends with the service")
}

// launch starts cmd under policy, as the executor's settings say, from a
// goroutine locked to an OS thread of its own (see above), which then waits
// for it. The channel receives Wait's result.
func (e *Executor) launch(cmd *exec.Cmd, policy confinedPolicy) (<-chan error, error) {
	if err := e.endWithProcess(cmd); err != nil {
		return nil, err
	}
	started := make(chan error, 1)
	waited := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		var err error
		restricted := false
		switch {
		case e.ns != nil:
			err = e.ns.start(cmd, policy, e.Confined())
		case e.Confined():
			restricted = true
			err = startConfinedHere(cmd, policy)
		default:
			err = cmd.Start()
		}
		started <- err
		if err == nil {
			waited <- cmd.Wait()
		}
		if !restricted {
			runtime.UnlockOSThread()
		}
	}()
	return waited, <-started
}

// endWithProcess makes cmd end with this process: started through the
// reaper, or with a parent-death signal. In namespaces the init program
// sets its own (taskinit.run): the runtime's check that the parent is
// still alive would misread a parent outside the new PID namespace.
func (e *Executor) endWithProcess(cmd *exec.Cmd) error {
	switch {
	case e.ns != nil:
		return nil
	case e.reaper != "":
		args, err := taskinit.Args(e.reaper, taskinit.Spec{Reaper: true, Parent: os.Getpid()}, cmd.Path, cmd.Args)
		if err != nil {
			return err
		}
		cmd.Path, cmd.Args = e.reaper, args
	default:
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	return nil
}
