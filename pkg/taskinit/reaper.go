package taskinit

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Without namespaces nothing ends a command's processes when the service
// dies (kill -9, a crash): they are re-parented and run on. With
// Spec.Reaper this process stands between the service and the command. It
// is the leader of the command's session and process group, and a child
// subreaper, so what the command leaves behind is re-parented to it; the
// service starts it with a parent-death signal. When its parent is no
// longer the service, it kills the process group and every process below
// it, and then itself.

// reap starts the command in this process's group, waits for it and
// returns its status; it kills everything should the service end first.
func reap(spec Spec, args []string, sigs <-chan os.Signal) (int, error) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return 0, fmt.Errorf("adopt orphaned processes: %w", err)
	}
	if spec.Parent == 0 {
		return 0, errors.New("reaper: no parent process id")
	}
	// SIGTERM, which outliveSignals catches: this process must live to
	// kill the others.
	if err := armParentDeath(unix.SIGTERM); err != nil {
		return 0, err
	}
	go watchParent(spec.Parent, sigs)
	if !parentIs(spec.Parent) {
		return 0, errors.New("the service that started this process has ended")
	}
	pid, err := syscall.ForkExec(args[1], args[2:], &syscall.ProcAttr{Env: os.Environ(), Files: []uintptr{0, 1, 2}})
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %s: %v\n", Name, args[1], err)
		if errors.Is(err, syscall.ENOENT) {
			return 127, nil
		}
		return 126, nil
	}
	// It may have ended while the command started, before the check above
	// could see it.
	if !parentIs(spec.Parent) {
		killAll()
	}
	status, err := waitFor(pid)
	if killing.Load() {
		// killAll ended the command first, and ends this process once
		// it has killed the rest: exiting now would leave that undone.
		select {}
	}
	return status, err
}

// killing is set once killAll began.
var killing atomic.Bool

// Parent watch timings.
const (
	// parentPoll is how often the parent is looked at in any case.
	parentPoll = 500 * time.Millisecond
	// afterSignalPoll and afterSignalFor: after a signal, more often for a
	// while.
	afterSignalPoll = 10 * time.Millisecond
	afterSignalFor  = 3 * time.Second
)

// watchParent kills everything once the parent is no longer parent. The
// parent-death signal is also sent when only the thread that started
// this process ended: a killed service's threads end one by one, this
// process passing to another of its threads (a signal, the parent still
// the same) before it passes to a reaper outside it (another signal, which
// the kernel may merge with the first while it is pending). So after a
// signal the parent is looked at often for a while, and every parentPoll
// always; so are the signals the command sends its group.
func watchParent(parent int, sigs <-chan os.Signal) {
	t := time.NewTicker(parentPoll)
	defer t.Stop()
	var fast <-chan time.Time
	var until time.Time
	for {
		select {
		case <-sigs:
			until = time.Now().Add(afterSignalFor)
			fast = time.After(0)
		case <-t.C:
		case <-fast:
			fast = nil
			if time.Now().Before(until) {
				fast = time.After(afterSignalPoll)
			}
		}
		if !parentIs(parent) {
			killAll()
		}
	}
}

// killAll kills the processes below this one, then its process group with
// this process in it. Those that left the group are found in /proc: a
// stopped process cannot fork, so they are stopped, pass after pass, and
// then killed.
func killAll() {
	if !killing.CompareAndSwap(false, true) {
		select {} // another call kills everything, this process last
	}
	self := os.Getpid()
	stopped := map[int]bool{}
	for range 20 {
		fresh := 0
		for _, pid := range descendants(self) {
			if !stopped[pid] && unix.Kill(pid, unix.SIGSTOP) == nil {
				stopped[pid] = true
				fresh++
			}
		}
		if fresh == 0 {
			break
		}
	}
	for pid := range stopped {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
	_ = unix.Kill(-unix.Getpgrp(), unix.SIGKILL)
	_ = unix.Kill(self, unix.SIGKILL)
}

// descendants lists the processes below pid, as /proc tells them.
func descendants(pid int) []int {
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(p) + "/task")
		for _, t := range tasks {
			b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/task/" + t.Name() + "/children")
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				if c, err := strconv.Atoi(f); err == nil {
					out = append(out, c)
					queue = append(queue, c)
				}
			}
		}
	}
	return out
}

// parentIs reports whether this process's parent is pid, in the process
// ids of the /proc mounted (the service's, before mountAll mounts the
// namespace's own). It reports true when /proc cannot tell.
func parentIs(pid int) bool {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return true
	}
	// The command name, in parentheses, may hold anything.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return true
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return true
	}
	ppid, err := strconv.Atoi(f[1])
	return err != nil || ppid == pid
}

// armParentDeath has sig sent to this process when the thread that started
// it ends. The setting belongs to a thread, and the kernel clears it when
// the thread's user changes (restrict switches the main thread's): it is
// set on a thread of its own, which does nothing else and never ends.
func armParentDeath(sig unix.Signal) error {
	armed := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		armed <- unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(sig), 0, 0, 0)
		select {}
	}()
	if err := <-armed; err != nil {
		return fmt.Errorf("parent-death signal: %w", err)
	}
	return nil
}
