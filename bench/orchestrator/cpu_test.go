package orchestrator_bench

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// cpuTimes is the CPU time used so far by each command name on the
// machine, with the time of this process's exited children (the nodes'
// processes) apart; it reads /proc and is empty where there is none.
type cpuTimes struct {
	byName   map[string]time.Duration
	children time.Duration
	busy     time.Duration // every CPU, from /proc/stat
}

func readCPU() cpuTimes {
	t := cpuTimes{byName: map[string]time.Duration{}}
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
			name = selfName
			t.children = tick(f[13]) + tick(f[14])
		}
		t.byName[name] += tick(f[11]) + tick(f[12])
	}
	return t
}

const selfName = "this process (orchestrator, worker)"

// cpuShare is what each process used between a and b, per node.
type cpuShare struct {
	name    string
	perNode time.Duration
}

func cpuBetween(a, b cpuTimes, nodes int) (shares []cpuShare, processes, busy time.Duration) {
	for name, v := range b.byName {
		if d := v - a.byName[name]; d > 0 && d*1000 > b.busy-a.busy { // at least 0.1%
			shares = append(shares, cpuShare{name, d / time.Duration(nodes)})
		}
	}
	return shares, (b.children - a.children) / time.Duration(nodes), (b.busy - a.busy) / time.Duration(nodes)
}
