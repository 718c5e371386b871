// Package procstat reads where a machine's CPU time goes, per command
// name, from /proc; the benchmarks use it to lay a gap to a target at each
// process's door. Where there is no /proc it reports nothing.
package procstat

import (
	"cmp"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Times is the CPU time used so far by each process on the machine, with
// the time of this process's exited children apart.
type Times struct {
	byPID    map[string]proc
	children time.Duration
	busy     time.Duration // every CPU, from /proc/stat
}

type proc struct {
	name string
	used time.Duration
}

// group is the name a process's time is reported under: kernel worker
// threads rename themselves after the queue they serve, so they are one.
func group(name string) string {
	if strings.HasPrefix(name, "kworker/") {
		return "kernel workers"
	}
	return name
}

// Read reads the machine's CPU times now.
func Read() Times {
	t := Times{byPID: map[string]proc{}}
	tick := func(s string) time.Duration {
		v, _ := strconv.ParseFloat(s, 64)
		return time.Duration(v * float64(time.Second) / 100) // USER_HZ
	}
	if raw, err := os.ReadFile("/proc/stat"); err == nil {
		f := strings.Fields(strings.SplitN(string(raw), "\n", 2)[0])
		for i, v := range f[1:] {
			if i != 3 && i != 4 { // idle and iowait
				t.busy += tick(v)
			}
		}
	}
	ents, _ := os.ReadDir("/proc")
	self := strconv.Itoa(os.Getpid())
	for _, e := range ents {
		pid := e.Name()
		if pid[0] < '0' || pid[0] > '9' {
			continue
		}
		raw, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			continue
		}
		s := string(raw)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		f := strings.Fields(s[end+2:])
		if len(f) < 15 {
			continue
		}
		name := s[open+1 : end]
		if pid == self {
			name = Self
			t.children = tick(f[13]) + tick(f[14])
		}
		t.byPID[pid] = proc{name: name, used: tick(f[11]) + tick(f[12])}
	}
	return t
}

// Self names this process in Times.
const Self = "this process"

// Share is what one command used between two readings, per unit of work.
type Share struct {
	Name string
	Per  time.Duration
}

// Between is what was used between a and b per unit of n units of work:
// by each command using at least 0.1% of it (most first), by this
// process's exited children, and in all.
func Between(a, b Times, n int) (shares []Share, children, busy time.Duration) {
	if n <= 0 {
		return nil, 0, 0
	}
	// A process's use is the difference of its two readings (all of it for
	// a process started in between); a process that ended is not counted.
	byName := map[string]time.Duration{}
	for pid, p := range b.byPID {
		d := p.used
		if before, ok := a.byPID[pid]; ok && before.used <= p.used {
			d -= before.used
		}
		byName[group(p.name)] += d
	}
	for name, d := range byName {
		if d > 0 && d*1000 > b.busy-a.busy {
			shares = append(shares, Share{name, d / time.Duration(n)})
		}
	}
	slices.SortFunc(shares, func(x, y Share) int { return cmp.Or(cmp.Compare(y.Per, x.Per), strings.Compare(x.Name, y.Name)) })
	return shares, (b.children - a.children) / time.Duration(n), (b.busy - a.busy) / time.Duration(n)
}
