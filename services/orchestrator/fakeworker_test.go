package orchestrator_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/topology"
)

// fakeNoModel is what the fake worker says of a node with a prompt only.
const fakeNoModel = "fake worker: no model acts on prompts"

// fakeNoChanges is why the fake worker changed nothing for a prompt-only
// node of a repository run given no guidance.
const fakeNoChanges = "no language model is configured"

// fakeWorker stands in for services/worker (which this package does not
// import) over the same contract: it takes TaskDispatch messages from each
// role's queue, runs the node's command with sh in a directory of its own
// within the dispatch's timeout, stops it on a TaskCancel, and reports a
// TaskResult that echoes the dispatch's fence. A node without a command
// succeeds with fakeNoModel as its output. A node of a repository run with
// edits, or with a prompt only, works in a checkout of the run's base commit
// with its dependencies' patches applied (spec T-10) and reports its changes
// from there as its patch: its edits, then its command; a prompt-only node
// writes its guidance to <node>.txt, and without guidance changes nothing
// (fakeNoChanges). The report names the files changed and the briefing's
// failure analysis of a retried node.
type fakeWorker struct {
	bus     *natsx.Bus
	id, dir string
	// running maps "<tenant>|<run>/<node>/<attempt>" to the cancel
	// function of the command running it.
	running sync.Map
	// seen holds every dispatch received, by "<run>/<node>", in order.
	mu   sync.Mutex
	seen map[string][]*taskv1.TaskDispatch
	// decorate, when set, adds to each result before it is reported.
	decorate func(*taskv1.TaskDispatch, *taskv1.TaskResult)
}

// startWorker runs a fake worker with concurrency tasks of each role at
// once until the test ends.
func (h *harness) startWorker(t *testing.T, concurrency int) *fakeWorker {
	t.Helper()
	return h.startWorkerWith(t, concurrency, nil)
}

// startWorkerWith is startWorker whose results decorate adds to.
func (h *harness) startWorkerWith(t *testing.T, concurrency int, decorate func(*taskv1.TaskDispatch, *taskv1.TaskResult)) *fakeWorker {
	t.Helper()
	w := &fakeWorker{bus: h.bus, id: "w1", dir: t.TempDir(), seen: map[string][]*taskv1.TaskDispatch{}, decorate: decorate}
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, topology.EnsureTasks(ctx, h.bus))
	sub, err := h.bus.Conn.Subscribe(topology.TaskCancelSubject(h.bus), w.onCancel)
	require.NoError(t, err)
	require.NoError(t, h.bus.Conn.Flush())
	var wg sync.WaitGroup
	for _, role := range topology.Roles {
		spec := topology.TaskConsumer(h.bus, role, natsx.ConsumerSpec{MaxDeliver: -1})
		_, err := h.bus.EnsureConsumer(ctx, spec)
		require.NoError(t, err)
		for range concurrency {
			wg.Go(func() { _ = h.bus.Consume(ctx, spec, w.handle) })
		}
	}
	t.Cleanup(func() {
		cancel()
		_ = sub.Unsubscribe()
		wg.Wait()
	})
	return w
}

// dispatches returns the dispatches of a run's node the worker received.
func (w *fakeWorker) dispatches(runID, node string) []*taskv1.TaskDispatch {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.seen[runID+"/"+node])
}

func (w *fakeWorker) key(tenant, run, node string, attempt int32) string {
	return fmt.Sprintf("%s|%s/%s/%d", tenant, run, node, attempt)
}

func (w *fakeWorker) onCancel(m *nats.Msg) {
	var c taskv1.TaskCancel
	if proto.Unmarshal(m.Data, &c) != nil {
		return
	}
	if stop, ok := w.running.Load(w.key(c.GetTenantId(), c.GetRunId(), c.GetNodeId(), c.GetAttempt())); ok {
		stop.(context.CancelFunc)()
	}
}

// handle runs one dispatch and reports its result; a cancelled one is
// dropped, as the Orchestrator ignores its result.
func (w *fakeWorker) handle(ctx context.Context, msg jetstream.Msg) error {
	var d taskv1.TaskDispatch
	if err := natsx.Unmarshal(msg, &d); err != nil {
		return err
	}
	w.mu.Lock()
	w.seen[d.GetRunId()+"/"+d.GetNodeId()] = append(w.seen[d.GetRunId()+"/"+d.GetNodeId()], &d)
	w.mu.Unlock()
	r := &taskv1.TaskResult{TenantId: d.GetTenantId(), RunId: d.GetRunId(), NodeId: d.GetNodeId(), Attempt: d.GetAttempt(),
		Fence: d.GetFence(), WorkerId: w.id, ReceivedTime: timestamppb.Now()}
	r.Report = &orchestratorv1.TaskReport{Briefing: d.GetNode().GetRetryBriefing().GetFailureAnalysis()}
	tctx, cancel := context.WithCancel(ctx)
	key := w.key(d.GetTenantId(), d.GetRunId(), d.GetNodeId(), d.GetAttempt())
	w.running.Store(key, cancel)
	w.run(tctx, &d, r)
	w.running.Delete(key)
	cancelled := tctx.Err() != nil
	cancel()
	if cancelled {
		return nil
	}
	if w.decorate != nil {
		w.decorate(&d, r)
	}
	r.ReportedTime = timestamppb.Now()
	_, err := w.bus.Publish(ctx, topology.ResultSubject(w.bus), fmt.Sprintf("%s:%s:%d:result", d.GetRunId(), d.GetNodeId(), d.GetAttempt()), r)
	return err
}

// run runs the dispatch's command and fills r with what it did.
func (w *fakeWorker) run(ctx context.Context, d *taskv1.TaskDispatch, r *taskv1.TaskResult) {
	n := d.GetNode()
	promptOnly := n.GetCommand() == "" && len(n.GetEdits()) == 0 && n.GetPrompt() != ""
	if d.GetRepository() != "" && (len(n.GetEdits()) > 0 || promptOnly) {
		w.change(ctx, d, r)
		return
	}
	if n.GetCommand() == "" {
		r.Stdout, r.Duration = fakeNoModel, durationpb.New(0)
		return
	}
	w.command(ctx, d, w.dir, r)
}

// command runs the dispatch's command in dir and fills r with what it did.
func (w *fakeWorker) command(ctx context.Context, d *taskv1.TaskDispatch, dir string, r *taskv1.TaskResult) {
	if t := d.GetTimeout().AsDuration(); t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, "sh", "-c", d.GetNode().GetCommand())
	cmd.Dir = dir
	// The command and whatever it starts are stopped together.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r.Duration = durationpb.New(time.Since(start))
	r.Stdout, r.Stderr = stdout.String(), stderr.String()
	var exit *exec.ExitError
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		r.ExitCode, r.TimedOut = -1, true
		r.Error = fmt.Sprintf("timed out after %s", d.GetTimeout().AsDuration())
	case errors.As(err, &exit):
		r.ExitCode = int32(exit.ExitCode())
	case err != nil:
		r.ExitCode, r.Error = -1, "could not start the command"
	}
}

// change makes the node's changes in a checkout of the run's repository at
// its base commit with its dependencies' patches committed, and reports
// them as a patch from there.
func (w *fakeWorker) change(ctx context.Context, d *taskv1.TaskDispatch, r *taskv1.TaskResult) {
	r.Duration = durationpb.New(0)
	dir, err := w.checkout(ctx, d)
	edits := d.GetNode().GetEdits()
	if g := d.GetNode().GetGuidance(); len(edits) == 0 && len(g) > 0 {
		edits = []*orchestratorv1.FileEdit{{Path: d.GetNodeId() + ".txt", Content: strings.Join(g, "\n") + "\n"}}
	}
	for _, e := range edits {
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, e.GetPath()), []byte(e.GetContent()), 0o644)
		}
		r.Report.FilesChanged = append(r.Report.FilesChanged, e.GetPath())
	}
	if err == nil && d.GetNode().GetCommand() != "" {
		if w.command(ctx, d, dir, r); r.GetExitCode() != 0 || r.GetError() != "" {
			return
		}
	}
	if err == nil {
		err = w.git(ctx, dir, "add", "-A")
	}
	var patch bytes.Buffer
	if err == nil {
		cmd := exec.CommandContext(ctx, "git", "diff", "--cached", "--binary")
		cmd.Dir, cmd.Stdout = dir, &patch
		err = cmd.Run()
	}
	switch {
	case err != nil:
		r.ExitCode, r.Error = -1, err.Error()
	case patch.Len() == 0 && len(edits) == 0:
		r.NoChangesReason = fakeNoChanges
	default:
		r.Patch = patch.String()
	}
}

// checkout clones the run's repository at its base commit and commits the
// dispatch's dependency patches on it, in order.
func (w *fakeWorker) checkout(ctx context.Context, d *taskv1.TaskDispatch) (string, error) {
	dir, err := os.MkdirTemp(w.dir, "checkout-")
	if err == nil {
		err = w.git(ctx, "", "clone", "--quiet", d.GetRepository(), dir)
	}
	if err == nil {
		err = w.git(ctx, dir, "checkout", "--quiet", d.GetBaseCommit())
	}
	for i, p := range d.GetDependencyPatches() {
		file := filepath.Join(w.dir, fmt.Sprintf("%s-%d.patch", filepath.Base(dir), i))
		if err == nil {
			err = os.WriteFile(file, []byte(p.GetPatch()), 0o600)
		}
		if err == nil {
			err = w.git(ctx, dir, "apply", "--index", file)
		}
	}
	if err == nil && len(d.GetDependencyPatches()) > 0 {
		err = w.git(ctx, dir, "-c", "user.name=fake", "-c", "user.email=fake@sylk.invalid", "commit", "--quiet", "-m", "dependencies")
	}
	return dir, err
}

func (w *fakeWorker) git(ctx context.Context, dir string, args ...string) error {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git %s: %w: %s", args[0], err, out)
	}
	return nil
}
