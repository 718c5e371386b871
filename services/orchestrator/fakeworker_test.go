package orchestrator_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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

// fakeWorker stands in for services/worker (which this package does not
// import) over the same contract: it takes TaskDispatch messages from each
// role's queue, runs the node's command with sh in a directory of its own
// within the dispatch's timeout, stops it on a TaskCancel, and reports a
// TaskResult that echoes the dispatch's fence. A node without a command
// succeeds with fakeNoModel as its output; a node of a repository run
// reports its edits as a patch from the run's base commit; the report names
// the files changed and the briefing's failure analysis of a retried node.
type fakeWorker struct {
	bus     *natsx.Bus
	id, dir string
	// running maps "<tenant>|<run>/<node>/<attempt>" to the cancel
	// function of the command running it.
	running sync.Map
}

// startWorker runs a fake worker with concurrency tasks of each role at
// once until the test ends.
func (h *harness) startWorker(t *testing.T, concurrency int) {
	t.Helper()
	w := &fakeWorker{bus: h.bus, id: "w1", dir: t.TempDir()}
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
	r.ReportedTime = timestamppb.Now()
	_, err := w.bus.Publish(ctx, topology.ResultSubject(w.bus), fmt.Sprintf("%s:%s:%d:result", d.GetRunId(), d.GetNodeId(), d.GetAttempt()), r)
	return err
}

// run runs the dispatch's command and fills r with what it did.
func (w *fakeWorker) run(ctx context.Context, d *taskv1.TaskDispatch, r *taskv1.TaskResult) {
	if d.GetRepository() != "" && len(d.GetNode().GetEdits()) > 0 {
		w.edit(ctx, d, r)
		return
	}
	command := d.GetNode().GetCommand()
	if command == "" {
		r.Stdout, r.Duration = fakeNoModel, durationpb.New(0)
		return
	}
	if t := d.GetTimeout().AsDuration(); t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, "sh", "-c", command)
	cmd.Dir = w.dir
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

// edit writes the node's edits in a checkout of the run's repository at its
// base commit and reports them as a patch.
func (w *fakeWorker) edit(ctx context.Context, d *taskv1.TaskDispatch, r *taskv1.TaskResult) {
	dir, err := os.MkdirTemp(w.dir, "checkout-")
	if err == nil {
		err = w.git(ctx, "", "clone", "--quiet", d.GetRepository(), dir)
	}
	if err == nil {
		err = w.git(ctx, dir, "checkout", "--quiet", d.GetBaseCommit())
	}
	for _, e := range d.GetNode().GetEdits() {
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, e.GetPath()), []byte(e.GetContent()), 0o644)
		}
		r.Report.FilesChanged = append(r.Report.FilesChanged, e.GetPath())
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
	r.Duration, r.Patch = durationpb.New(0), patch.String()
	if err != nil {
		r.ExitCode, r.Error = -1, err.Error()
	}
}

func (w *fakeWorker) git(ctx context.Context, dir string, args ...string) error {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git %s: %w: %s", args[0], err, out)
	}
	return nil
}
