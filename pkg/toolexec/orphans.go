package toolexec

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
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

// orphanSweeper tracks the runs of this process's executors and kills the
// processes of ended ones.
type orphanSweeper struct {
	prefix string // "<pid>.<random>-": this process's markers
	seq    atomic.Uint64
	mu     sync.Mutex
	live   map[string]struct{}
	start  sync.Once
	killed atomic.Int64
}

var sweeper = newOrphanSweeper()

func newOrphanSweeper() *orphanSweeper {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return &orphanSweeper{prefix: strconv.Itoa(os.Getpid()) + "." + hex.EncodeToString(b) + "-", live: map[string]struct{}{}}
}

// begin returns the marker of a new run, live until end, and starts the
// sweeper on the first run.
func (s *orphanSweeper) begin() string {
	m := s.prefix + strconv.FormatUint(s.seq.Add(1), 10)
	s.mu.Lock()
	s.live[m] = struct{}{}
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

// sweep kills every process that carries a marker of this process whose
// run has ended, and returns how many it killed. It stops them first, pass
// after pass until a pass finds no new one, and only then kills them: a
// stopped process cannot fork, so a chain of forks that would outrun a list
// of pids is caught whole.
func (s *orphanSweeper) sweep() int {
	stopped := map[int]bool{}
	for range maxSweepPasses {
		fresh := 0
		for _, pid := range s.endedRunProcesses() {
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
	return n
}

// maxSweepPasses bounds the stopping passes of one sweep.
const maxSweepPasses = 50

// endedRunProcesses lists the processes carrying a marker of this process
// whose run has ended.
func (s *orphanSweeper) endedRunProcesses() []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	key := []byte(RunMarkerEnv + "=" + s.prefix)
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		// Another user's process, or one already gone: not readable.
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		if marker, ok := markerIn(env, key); ok && !s.isLive(marker) {
			out = append(out, pid)
		}
	}
	return out
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

// SweepOrphans kills the processes left by ended runs of this process's
// executors now, rather than at the next sweep, and returns how many.
func SweepOrphans() int { return sweeper.sweep() }

// OrphansKilled is how many processes left by ended runs were killed.
func OrphansKilled() int64 { return sweeper.killed.Load() }
