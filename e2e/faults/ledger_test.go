//go:build faults

package faults

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sylk.dev/sylk/pkg/testenv"
)

// The ledger is one file that every task command appends a line to when it
// starts and another when it ends:
//
//	start <tag> <node> <exec> <pid> <unix ns>
//	end   <tag> <node> <exec> <pid> <unix ns>
//
// tag names the run (the suite's name for it, as the command is written
// before the run has an id), exec is unique to one execution of the
// command (its start time and PID), pid is the shell's PID in the task's
// PID namespace. A command does not know its attempt number (the worker
// passes none to it), so executions are told apart by exec and compared
// with the attempt the Orchestrator reports.
//
// Task commands run confined (Landlock, namespaces, as the task user when
// the worker is root): they may write their workspace and the directories
// of -toolexec.confine-writable, which the suite sets to the ledger's
// directory; that directory is writable by anyone, its parent traversable.

// ledgerFile is the ledger's name in its directory.
const ledgerFile = "ledger"

// ledgerDir is a directory task commands may write, whatever user they
// run as. It is not a t.TempDir: that one's parent is private to the
// test's user, and its name holds the test's, which may have a comma (the
// separator of -toolexec.confine-writable).
func ledgerDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sylk-faults-ledger-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// taskCommand is a node's command: a ledger line, sleep d, a ledger line.
func taskCommand(dir, tag, node string, d time.Duration) string {
	l := filepath.Join(dir, ledgerFile)
	return fmt.Sprintf(`e="$(date +%%s%%N)-$$"; echo "start %[2]s %[3]s $e $$ $(date +%%s%%N)" >> %[1]s; sleep %.1[4]f; echo "end %[2]s %[3]s $e $$ $(date +%%s%%N)" >> %[1]s`,
		l, tag, node, d.Seconds())
}

// execution is one run of a task command, as the ledger tells it.
type execution struct {
	id         string
	start, end time.Time
	ended      bool
}

// ledger is what the ledger says, by "<tag>/<node>".
type ledger struct {
	execs map[string][]*execution
	lines int
}

// readLedger parses the ledger in dir.
func readLedger(dir string) (*ledger, error) {
	l := &ledger{execs: map[string][]*execution{}}
	f, err := os.Open(filepath.Join(dir, ledgerFile))
	if os.IsNotExist(err) {
		return l, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	byID := map[string]*execution{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 6 || (fs[0] != "start" && fs[0] != "end") {
			continue // a line cut short by a kill
		}
		l.lines++
		ns, err := strconv.ParseInt(fs[5], 10, 64)
		if err != nil {
			continue
		}
		at, key := time.Unix(0, ns), fs[1]+"/"+fs[2]
		e := byID[key+"/"+fs[3]]
		if e == nil {
			e = &execution{id: fs[3]}
			byID[key+"/"+fs[3]] = e
			l.execs[key] = append(l.execs[key], e)
		}
		if fs[0] == "start" {
			e.start = at
		} else {
			e.end, e.ended = at, true
		}
	}
	return l, sc.Err()
}

// firstProgressAfter is the first start later than at that moved the
// work on, or the zero time: a start of a task none of whose other
// executions was alive then (one that started before and ended after it).
// A second live copy is not progress; a restart of an execution that died
// without ending is.
func (l *ledger) firstProgressAfter(at time.Time) time.Time {
	var first time.Time
	for _, execs := range l.execs {
		for _, e := range execs {
			if e.start.After(at) && (first.IsZero() || e.start.Before(first)) && !overlapped(execs, e) {
				first = e.start
			}
		}
	}
	return first
}

// overlapped reports whether another of execs was alive when e started.
func overlapped(execs []*execution, e *execution) bool {
	for _, o := range execs {
		if o != e && o.start.Before(e.start) && o.ended && o.end.After(e.start) {
			return true
		}
	}
	return false
}

// ended is the executions of key that wrote their end line.
func (l *ledger) ended(key string) int {
	n := 0
	for _, e := range l.execs[key] {
		if e.ended {
			n++
		}
	}
	return n
}

// taskKeyPattern finds the "<tag>/<node>" of a task command in a command
// line.
var taskKeyPattern = regexp.MustCompile(`start (\S+) (\S+) `)

// liveTasks are the machine's task processes of the ledger in dir (their
// command lines name it), by "<tag>/<node>": shells of task commands still
// running, inside or outside a worker.
func liveTasks(t testing.TB, dir string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, pid := range testenv.ProcessesWith(t, filepath.Join(dir, ledgerFile)) {
		b, err := os.ReadFile(filepath.Join("/proc", pid, "cmdline"))
		if err != nil {
			continue
		}
		if m := taskKeyPattern.FindStringSubmatch(string(b)); m != nil {
			out[m[1]+"/"+m[2]] = append(out[m[1]+"/"+m[2]], pid)
		}
	}
	return out
}

// killTasks kills the task processes of the ledger in dir still running,
// logging them: at the end of a scenario there should be none.
func killTasks(t testing.TB, dir string) {
	t.Helper()
	for key, pids := range liveTasks(t, dir) {
		t.Logf("task %s still running at the end (PIDs %v): killed", key, pids)
		for _, p := range pids {
			if n, err := strconv.Atoi(p); err == nil {
				_ = syscall.Kill(n, syscall.SIGKILL)
			}
		}
	}
}
