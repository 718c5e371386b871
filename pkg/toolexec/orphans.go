package toolexec

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// RunMarkerEnv names the variable every command an executor runs carries,
// with the run's marker. When a command ends, its process group is killed;
// a process that left the group first (setsid, a daemonising double fork)
// is out of that kill's reach, but still carries the marker unless it
// cleared its environment. The orphan sweeper kills those whose run has
// ended (spec C-27 cleans up orphans by killing the group; this reaches
// the ones that left it).
const RunMarkerEnv = "TOOLEXEC_RUN"

// OrphanSweepInterval is how often the sweeper looks for processes left by
// ended runs, while any run has started in this process.
const OrphanSweepInterval = time.Second

// A process that left its command's session and cleared its environment
// carries no marker. So that it cannot outlive its task unseen either, an
// executor makes this process a child subreaper: a process orphaned below
// it (its parent exited) is re-parented to this process instead of to the
// system's init. The sweeper kills such an adopted process, and reaps it,
// once no run that was live when it started is live any more: one started
// before every live run began cannot belong to any of them. This process's
// own children outside runs (the services' git) stay in its session and
// are left alone.

// orphanSweeper tracks the runs of this process's executors and kills the
// processes of ended ones.
type orphanSweeper struct {
	prefix string // "<pid>.<random>-": this process's markers
	seq    atomic.Uint64
	mu     sync.Mutex
	live   map[string]int64 // marker -> when its run began, in clock ticks since boot
	start  sync.Once
	killed atomic.Int64
	// adopting is whether this process is a child subreaper.
	adopting atomic.Bool
	// sweeping serialises sweeps (the ticker's and SweepOrphans'), and
	// guards zombies.
	sweeping sync.Mutex
	// zombies are the exited children in this process's session, by pid,
	// with when each was first seen exited (see reap).
	zombies map[zombieKey]time.Time
}

// zombieKey names a process: a pid and its start time.
type zombieKey struct {
	pid   int
	start int64
}

// staleZombie is how long a child in this process's session must have
// been a zombie before the sweep reaps it. Such a child is either one of
// this process's own programs, which os/exec waits for as soon as it
// exits, or a process one of them left behind when it exited (a helper of
// git killed on a timeout, a detached git gc): since this process adopts
// orphans, nothing else would ever reap those.
const staleZombie = 30 * time.Second

var sweeper = newOrphanSweeper()

func newOrphanSweeper() *orphanSweeper {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return &orphanSweeper{prefix: strconv.Itoa(os.Getpid()) + "." + hex.EncodeToString(b) + "-", live: map[string]int64{},
		zombies: map[zombieKey]time.Time{}}
}

// adoptOrphans makes this process a child subreaper, once.
var adoptOrphans = sync.OnceValue(func() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("toolexec: adopt orphaned processes: %w", err)
	}
	sweeper.adopting.Store(true)
	return nil
})

// clockTicks is the unit of a process's start time in /proc/<pid>/stat
// (USER_HZ, 100 on every architecture Linux runs this on).
const clockTicks = 100

// bootTicks is the time since boot in clock ticks, on the clock of the
// start times in /proc/<pid>/stat.
func bootTicks() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	return ts.Nano() / (int64(time.Second) / clockTicks)
}

// begin returns the marker of a new run, live until end, and starts the
// sweeper on the first run.
func (s *orphanSweeper) begin() string {
	m := s.prefix + strconv.FormatUint(s.seq.Add(1), 10)
	s.mu.Lock()
	s.live[m] = bootTicks()
	s.mu.Unlock()
	s.start.Do(func() {
		go func() {
			t := time.NewTicker(OrphanSweepInterval)
			defer t.Stop()
			for range t.C {
				s.sweep()
			}
		}()
	})
	return m
}

func (s *orphanSweeper) end(marker string) {
	s.mu.Lock()
	delete(s.live, marker)
	s.mu.Unlock()
}

func (s *orphanSweeper) isLive(marker string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.live[marker]
	return ok
}

// horizon is the clock tick before which an adopted process must have
// started to be swept: the start of the earliest live run, or now when none
// is live (a run that begins during the sweep begins after it).
func (s *orphanSweeper) horizon() int64 {
	h := bootTicks()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.live {
		h = min(h, t)
	}
	return h
}

// sweep kills every process that carries a marker of this process whose
// run has ended, and every adopted process no live run can own, and returns
// how many it killed. It stops them first, pass after pass until a pass
// finds no new one, and only then kills them: a stopped process cannot
// fork, so a chain of forks that would outrun a list of pids is caught
// whole. Adopted processes that have exited are reaped.
func (s *orphanSweeper) sweep() int {
	s.sweeping.Lock()
	defer s.sweeping.Unlock()
	h := s.horizon()
	stopped := map[int]bool{}
	var kids []adoptedProcess
	for range maxSweepPasses {
		var targets []int
		targets, kids = s.scan(h)
		fresh := 0
		for _, pid := range targets {
			if !stopped[pid] && syscall.Kill(pid, syscall.SIGSTOP) == nil {
				stopped[pid] = true
				fresh++
			}
		}
		if fresh == 0 {
			break
		}
	}
	n := 0
	for pid := range stopped {
		// Its process group too: a kill of a group is atomic with respect
		// to forks, so members the passes missed go with it.
		if pgid, err := syscall.Getpgid(pid); err == nil && pgid > 1 && pgid != syscall.Getpgrp() {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			n++
		}
	}
	s.killed.Add(int64(n))
	// Those just killed are reaped by the next sweep.
	s.reap(kids, h, time.Now())
	return n
}

// adoptedProcess is what the sweep needs of a child of this process.
type adoptedProcess struct {
	pid, ppid, sid int
	zombie         bool
	start          int64 // clock ticks since boot
	// own is whether it is in this process's session: one of its own
	// programs, or a process one of them left behind.
	own bool
}

// parseStat reads /proc/<pid>/stat: the name, in parentheses, may hold
// anything, so the fields are counted after its last ')'.
func parseStat(stat []byte) (adoptedProcess, bool) {
	open := bytes.IndexByte(stat, '(')
	end := bytes.LastIndexByte(stat, ')')
	if open < 1 || end < open {
		return adoptedProcess{}, false
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(stat[:open])))
	if err != nil {
		return adoptedProcess{}, false
	}
	// state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt
	// cmajflt utime stime cutime cstime priority nice num_threads
	// itrealvalue starttime
	f := strings.Fields(string(stat[end+1:]))
	if len(f) < 20 {
		return adoptedProcess{}, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	sid, err2 := strconv.Atoi(f[3])
	start, err3 := strconv.ParseInt(f[19], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return adoptedProcess{}, false
	}
	return adoptedProcess{pid: pid, ppid: ppid, sid: sid, zombie: f[0] == "Z", start: start}, true
}

// reap collects the exit status of adopted processes outside this
// process's session that started before tick h and have exited, and of
// children in its session that have been zombies for staleZombie by now.
// Only a zombie is reaped: its pid cannot have been given to another
// process, so no status of a command a run waits for is taken, and this
// process's own programs are waited for long before they are stale. Called
// with s.sweeping held; kids are this process's children, as scan found
// them.
func (s *orphanSweeper) reap(kids []adoptedProcess, h int64, now time.Time) {
	seen := map[zombieKey]bool{}
	for _, p := range kids {
		if !p.zombie {
			continue
		}
		if !p.own {
			if p.start < h {
				_, _ = unix.Wait4(p.pid, nil, unix.WNOHANG, nil)
			}
			continue
		}
		k := zombieKey{p.pid, p.start}
		seen[k] = true
		first, ok := s.zombies[k]
		if !ok {
			s.zombies[k] = now
		} else if now.Sub(first) >= staleZombie {
			_, _ = unix.Wait4(p.pid, nil, unix.WNOHANG, nil)
		}
	}
	for k := range s.zombies {
		if !seen[k] {
			delete(s.zombies, k)
		}
	}
}

// maxSweepPasses bounds the stopping passes of one sweep.
const maxSweepPasses = 50

// endedRunProcesses lists the processes carrying a marker of this process
// whose run has ended.
func (s *orphanSweeper) endedRunProcesses() []int {
	targets, _ := s.scan(math.MinInt64)
	return targets
}

// scan reads /proc once. It returns the processes to stop: those carrying a
// marker of this process whose run has ended, and the running adopted
// processes outside this process's session that started before tick h. It
// also returns this process's children (none when it is not adopting
// orphans).
func (s *orphanSweeper) scan(h int64) (targets []int, kids []adoptedProcess) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, nil
	}
	self := os.Getpid()
	sid, err := unix.Getsid(0)
	adopting := s.adopting.Load() && err == nil
	key := []byte(RunMarkerEnv + "=" + s.prefix)
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if adopting {
			if stat, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
				if p, ok := parseStat(stat); ok && p.ppid == self {
					p.own = p.sid == sid
					kids = append(kids, p)
					if !p.own && !p.zombie && p.start < h {
						targets = append(targets, pid)
						continue
					}
				}
			}
		}
		// Another user's process, or one already gone: not readable.
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		if marker, ok := markerIn(env, key); ok && !s.isLive(marker) {
			targets = append(targets, pid)
		}
	}
	return targets, kids
}

// markerIn finds the variable key (NAME=prefix) in a NUL-separated
// environment and returns its value.
func markerIn(env, key []byte) (string, bool) {
	for len(env) > 0 {
		v, rest, _ := bytes.Cut(env, []byte{0})
		if bytes.HasPrefix(v, key) {
			_, val, _ := bytes.Cut(v, []byte("="))
			return string(val), true
		}
		env = rest
	}
	return "", false
}

// sweepDeadOwners kills, once per process, the processes carrying the
// marker of an executor whose process has ended: a service that died
// without stopping its commands (kill -9) and left what they started in
// the background running, where no parent-death signal reached
// (parentdeath.go). It returns how many it killed. An owner whose process
// id is in use again is taken for alive.
var sweepDeadOwners = sync.OnceValue(killDeadOwners)

// killDeadOwners is sweepDeadOwners, each time it is called.
func killDeadOwners() int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	key := []byte(RunMarkerEnv + "=")
	ourNS, _ := os.Readlink("/proc/self/ns/pid")
	n := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		// The owner's process id is one of its PID namespace: a process
		// of another (an executor run by a task in namespaces of its own)
		// names an owner this process cannot see.
		if ns, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err != nil || ns != ourNS {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		marker, ok := markerIn(env, key)
		if !ok {
			continue
		}
		owner, _, _ := strings.Cut(marker, ".")
		if o, err := strconv.Atoi(owner); err == nil && o > 0 && o != os.Getpid() && syscall.Kill(o, 0) == syscall.ESRCH &&
			syscall.Kill(pid, syscall.SIGKILL) == nil {
			n++
		}
	}
	sweeper.killed.Add(int64(n))
	return n
}

// SweepOrphans kills the processes left by ended runs of this process's
// executors now, rather than at the next sweep, and returns how many.
func SweepOrphans() int { return sweeper.sweep() }

// OrphansKilled is how many processes left by ended runs were killed.
func OrphansKilled() int64 { return sweeper.killed.Load() }
