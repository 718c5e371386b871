//go:build faults

package faults

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Workload of every scenario: runs chains of chain task commands, each
// sleeping taskTime, which is longer than the streams' duplicate window
// (dupWindow, shortened from its 2 minutes so that the suite need not wait
// minutes for it). A chain makes each next start wait for the
// Orchestrator to apply the previous result and dispatch the next node,
// so the first start after a fault shows the mesh moving again.
const (
	runs      = 8
	chain     = 3
	taskTime  = 6 * time.Second
	dupWindow = 2 * time.Second
	// faultBeforeEnd is how long before the first tasks' end the fault
	// hits (taskTime-faultBeforeEnd must exceed dupWindow).
	faultBeforeEnd = time.Second
	// runWait bounds a scenario's runs after the fault.
	runWait = 4 * time.Minute
	// quiet is how long the ledger must stay unchanged, with no task
	// process alive, after the runs ended before the suite counts: a
	// second copy of a task may run on after its run ended.
	quiet = 5 * time.Second
)

// scenario is one fault and the mesh it hits.
type scenario struct {
	name string
	// orchestrators are the replicas started; runs are submitted to the
	// first.
	orchestrators []string
	workers       []string
	// workerFlags are added to the workers' flags.
	workerFlags []string
	// fault does it; it returns when the fault is over (a restarted
	// process healthy again, or a replica left dead).
	fault func(t *testing.T, m *mesh)
}

// row is one scenario's line of the table.
type row struct {
	scenario                                string
	submitted, completed, lost, dup, reruns int
	resume                                  string
}

// TestFaults runs every scenario on a mesh of its own, one after another,
// and prints the table of their rows; a scenario that lost a task or
// executed one twice fails.
func TestFaults(t *testing.T) {
	bin := buildBinaries(t)
	tp := newPGTemplate(t)
	var rows []row
	for _, sc := range scenarios() {
		// A scenario stopped short (a service that did not start) keeps
		// its row, saying so.
		rows = append(rows, row{scenario: sc.name, resume: "(did not finish)"})
		t.Run(sc.name, func(t *testing.T) {
			rows[len(rows)-1] = runScenario(t, bin, tp, sc)
		})
	}
	printTable(rows)
}

// scenarios are the faults of issue 27's acceptance list.
func scenarios() []scenario {
	one, two := []string{"orch-a"}, []string{"orch-a", "orch-b"}
	w, ws := []string{"worker-a"}, []string{"worker-a", "worker-b"}
	return []scenario{
		{name: "orchestrator kill -9 then restart", orchestrators: one, workers: w, fault: restartService("orch-a", syscall.SIGKILL)},
		{name: "orchestrator SIGTERM then restart", orchestrators: one, workers: w, fault: restartService("orch-a", syscall.SIGTERM)},
		{name: "orchestrator kill -9 and a second replica takes over", orchestrators: two, workers: w, fault: stopService("orch-a", syscall.SIGKILL)},
		{name: "orchestrator SIGTERM and a second replica takes over", orchestrators: two, workers: w, fault: stopService("orch-a", syscall.SIGTERM)},
		{name: "worker kill -9 then restart", orchestrators: one, workers: w, fault: restartService("worker-a", syscall.SIGKILL)},
		// A restarted worker kills what its dead predecessor left in its
		// cgroups; a worker that stays dead, with another one taking
		// over, shows whether task processes die with their worker.
		{name: "worker kill -9 and a second worker takes over", orchestrators: one, workers: ws, fault: stopService("worker-a", syscall.SIGKILL)},
		// Where the worker cannot make namespaces (no user namespaces, a
		// locked-down container), task commands are its children alone.
		{name: "worker kill -9 and a second worker takes over (no namespaces)", orchestrators: one, workers: ws, fault: stopService("worker-a", syscall.SIGKILL),
			workerFlags: []string{"-toolexec.namespaces", "off", "-toolexec.unsafe-run-tasks-as-root"}},
		{name: "worker SIGTERM then restart", orchestrators: one, workers: w, fault: restartService("worker-a", syscall.SIGTERM)},
		{name: "NATS restart (3s down)", orchestrators: one, workers: w, fault: func(t *testing.T, m *mesh) {
			m.nats.stop(syscall.SIGTERM, 30*time.Second)
			time.Sleep(3 * time.Second) // the outage itself, not a wait for anything
			require.NoError(t, m.nats.restart())
		}},
		{name: "Redis restart (5s down and empty)", orchestrators: one, workers: w, fault: func(t *testing.T, m *mesh) {
			m.redis.stop(syscall.SIGTERM, 30*time.Second)
			time.Sleep(5 * time.Second) // the outage itself
			require.NoError(t, m.redis.restart())
		}},
		{name: "PostgreSQL restart (3s down)", orchestrators: one, workers: w, fault: func(t *testing.T, m *mesh) {
			require.NoError(t, m.pg.stop())
			time.Sleep(3 * time.Second) // the outage itself
			require.NoError(t, m.pg.start())
		}},
	}
}

// restartService stops the service name with sig (waiting up to a minute
// for it to exit) and starts it again at once with the same flags.
func restartService(name string, sig syscall.Signal) func(*testing.T, *mesh) {
	return func(t *testing.T, m *mesh) {
		s := m.service(name)
		took, killed := s.stop(sig, time.Minute)
		t.Logf("%s stopped with %s in %s (killed after the minute: %v)", name, sig, took.Round(time.Millisecond), killed)
		require.NoError(t, s.restart())
	}
}

// stopService stops the service name with sig for good (killing it when
// it has not exited after a minute).
func stopService(name string, sig syscall.Signal) func(*testing.T, *mesh) {
	return func(t *testing.T, m *mesh) {
		took, killed := m.service(name).stop(sig, time.Minute)
		t.Logf("%s stopped with %s in %s (killed after the minute: %v)", name, sig, took.Round(time.Millisecond), killed)
	}
}

// service is the orchestrator or worker named name.
func (m *mesh) service(name string) *service {
	if s := m.orchs[name]; s != nil {
		return s
	}
	return m.workers[name]
}

// runScenario runs one scenario and returns its row; it fails the test on
// a lost or twice-executed task.
func runScenario(t *testing.T, bin binaries, tp *pgTemplate, sc scenario) row {
	m := newMesh(t, bin, tp, dupWindow)
	for _, o := range sc.orchestrators {
		m.startOrchestrator(o)
	}
	for _, w := range sc.workers {
		m.startWorker(w, runs, sc.workerFlags...)
	}
	names := submit(t, m, m.dial(m.orchs[sc.orchestrators[0]].grpcAddr))

	// The fault hits when every chain's first task has run longer than the
	// duplicate window, so that a dispatch published again is no longer
	// recognised as one, and has at most faultBeforeEnd left to run, so
	// that the resume time is mostly the mesh's recovery rather than the
	// tasks' remaining time.
	require.True(t, waitFor(2*time.Minute, func() bool { return firstTasksOlderThan(m, taskTime-faultBeforeEnd) }),
		"the first tasks did not start:\n%s", m.logs())
	faultAt := time.Now()
	t.Logf("fault at %s", faultAt.UTC().Format(time.RFC3339Nano))
	sc.fault(t, m)

	states := waitRuns(t, m, names)
	settle(t, m)
	r := count(t, m, sc.name, names, states, faultAt)
	if r.lost > 0 || r.dup > 0 {
		t.Logf("service logs:\n%s", m.logs())
	}
	assert.Zero(t, r.lost, "tasks lost")
	assert.Zero(t, r.dup, "tasks executed twice")
	return r
}

// firstTasksOlderThan reports whether the first task of every chain has
// started at least age ago.
func firstTasksOlderThan(m *mesh, age time.Duration) bool {
	l, err := readLedger(m.ledger)
	if err != nil {
		return false
	}
	for i := range runs {
		ex := l.execs[fmt.Sprintf("r%d/n1", i)]
		if len(ex) == 0 || time.Since(ex[0].start) < age {
			return false
		}
	}
	return true
}

// settle waits until no task process of the scenario is alive and the
// ledger has not changed for quiet (at most two minutes): what runs on
// after its run ended is counted too.
func settle(t *testing.T, m *mesh) {
	last, since := -1, time.Now()
	ok := waitFor(2*time.Minute, func() bool {
		l, err := readLedger(m.ledger)
		if err != nil {
			return false
		}
		if l.lines != last || len(liveTasks(t, m.ledger)) > 0 {
			last, since = l.lines, time.Now()
			return false
		}
		return time.Since(since) >= quiet
	})
	if !ok {
		t.Logf("task processes still running two minutes after the runs ended: %v", liveTasks(t, m.ledger))
	}
}

// count makes the scenario's row from the ledger, the task processes left
// running and the runs' final states. For each task:
//   - completed: its run's node SUCCEEDED and at least one execution ended;
//   - lost: not completed;
//   - executed twice: two executions ended, or one is still running when
//     everything is quiet (a copy nobody will account for);
//   - rerun: an execution that never ended and whose process is gone,
//     followed by another (a restart after a real failure, not counted as
//     executed twice).
func count(t *testing.T, m *mesh, name string, names []string, states []runState, faultAt time.Time) row {
	l, err := readLedger(m.ledger)
	require.NoError(t, err)
	live := liveTasks(t, m.ledger)
	r := row{scenario: name, submitted: runs * chain}
	var notes []string
	for i := range runs {
		for n := 1; n <= chain; n++ {
			key, node := fmt.Sprintf("r%d/n%d", i, n), fmt.Sprintf("n%d", n)
			ended, execs := l.ended(key), len(l.execs[key])
			st := states[i].nodes[node]
			if st.succeeded && ended >= 1 {
				r.completed++
			} else {
				r.lost++
				notes = append(notes, fmt.Sprintf("%s lost (run %s %s, node %s, %d executions, %d ended)", key, names[i], states[i].state, st.state, execs, ended))
			}
			if ended >= 2 || len(live[key]) > 0 {
				r.dup++
				notes = append(notes, fmt.Sprintf("%s executed twice: %d executions, %d ended, %d still running; the Orchestrator reports attempt %d",
					key, execs, ended, len(live[key]), st.attempt))
			} else if execs > 1 {
				r.reruns += execs - 1
			}
		}
	}
	r.resume = "none"
	if at := l.firstProgressAfter(faultAt); !at.IsZero() {
		r.resume = at.Sub(faultAt).Round(100 * time.Millisecond).String()
	}
	for _, n := range notes {
		t.Log(n)
	}
	return r
}

// printTable prints the scenarios' rows.
func printTable(rows []row) {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "\nFAULT SUITE\nscenario\tsubmitted\tcompleted\tlost\tduplicated\treruns\tresume")
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%s\n", r.scenario, r.submitted, r.completed, r.lost, r.dup, r.reruns, r.resume)
	}
	_ = w.Flush()
	fmt.Println("(resume: from the fault to the first start after it of a task with no other copy alive; reruns: executions restarted after the previous one really died)")
}

// callCtx is the context of one call of the suite to an Orchestrator.
func callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(caller(context.Background()), 10*time.Second)
}
