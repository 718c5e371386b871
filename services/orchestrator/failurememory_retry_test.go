package orchestrator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/topology"
	"sylk.dev/sylk/services/orchestrator"
)

// retriedParse is a run of one node that may retry once, at once.
func retriedParse(t *testing.T, h *harness, ctx context.Context) (*orchestratorv1.Run, string) {
	t.Helper()
	parse := cmd("parse", "make parse")
	parse.Name, parse.Files = "Rewrite the calc parser", []string{"pkg/calc/parser.go"}
	parse.Retry = &orchestratorv1.RetryPolicy{Max: 1, Backoff: durationpb.New(time.Millisecond)}
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{SessionId: ids.New(), Dag: dagOf(parse)})
	return run, strings.TrimPrefix(run.GetName(), "runs/")
}

// failAttempt reports attempt of the run's parse node as failed.
func failAttempt(t *testing.T, h *harness, runID string, attempt int32) {
	t.Helper()
	h.tasks(t, "engineer", 1)
	h.publishResult(t, "", &taskv1.TaskResult{TenantId: "t1", RunId: runID, NodeId: "parse", Attempt: attempt, ExitCode: 2,
		Stderr: "build failed\nparser.go:4: undefined: Parse", Duration: durationpb.New(time.Second), WorkerId: "test-worker"})
}

// archivedFailures collects the failure records the Archivalist is sent
// until the run's checkpoint and want failures arrived.
func archivedFailures(t *testing.T, h *harness, want int) map[string]*messagev1.StoreRequest {
	t.Helper()
	require.NoError(t, topology.EnsureAgents(context.Background(), h.bus))
	inbox, err := h.bus.EnsureConsumer(context.Background(), topology.InboxConsumer(h.bus, topology.AgentArchivalist, natsx.ConsumerSpec{}))
	require.NoError(t, err)
	out := map[string]*messagev1.StoreRequest{}
	var n, others int
	testenv.Consume(t, inbox, 10, waitFor, func(env *messagev1.Envelope) {
		if env.GetStoreRequest().GetCategory() != orchestrator.CategoryFailure {
			others++
			return
		}
		n++
		out[env.GetId()] = env.GetStoreRequest()
	}, func() bool { return n >= want && others >= 1 })
	require.Equal(t, want, n, "each failed attempt once: %v", out)
	return out
}

// Spec G-25: a node that failed and then succeeded on retry leaves one
// failure record of its failed attempt, marked recovered, with the end of
// that attempt's output.
func TestRecoveredFailureIsRecorded(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	ctx := userCtx("t1")
	run, runID := retriedParse(t, h, ctx)
	failAttempt(t, h, runID, 1)
	h.tasks(t, "engineer", 1)
	h.sendResult(t, "t1", runID, "parse", 2, 0, "", "")
	h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_SUCCEEDED)

	recs := archivedFailures(t, h, 1)
	rec := recs[runID+":parse:1:failure"]
	require.NotNil(t, rec, "%v", recs)
	require.Equal(t, "Failed, then recovered: Rewrite the calc parser ("+run.GetName()+", node parse, attempt 1) in pkg/calc/parser.go",
		rec.GetTitle())
	for _, want := range []string{
		"Task Rewrite the calc parser failed at attempt 1 (exit 2, error tier permanent); attempt 2 succeeded.",
		"Node: parse\nAttempt: 1\n", "Recovered: attempt 2 succeeded\nOutcome: recovered\n",
		"Signature: parser.go:#: undefined: parse\n", "Files: pkg/calc/parser.go",
		"## End of its output\n\nbuild failed\nparser.go:4: undefined: Parse",
	} {
		require.Contains(t, rec.GetContent(), want)
	}
}

// Spec G-25: a node that fails on its retry too leaves one record per
// failed attempt, neither recovered, and none twice.
func TestEachFailedAttemptIsOneFailureRecord(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	ctx := userCtx("t1")
	run, runID := retriedParse(t, h, ctx)
	failAttempt(t, h, runID, 1)
	failAttempt(t, h, runID, 2)
	h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_FAILED)

	recs := archivedFailures(t, h, 2)
	for attempt, want := range map[string]string{"1": "failed after attempt 1", "2": "failed after attempt 2"} {
		rec := recs[runID+":parse:"+attempt+":failure"]
		require.NotNil(t, rec, "%v", recs)
		require.Equal(t, "Failed: Rewrite the calc parser ("+run.GetName()+", node parse) in pkg/calc/parser.go", rec.GetTitle())
		require.Contains(t, rec.GetContent(), want)
		require.Contains(t, rec.GetContent(), "Outcome: not recovered\n")
		require.NotContains(t, rec.GetContent(), "Recovered:")
		require.Contains(t, rec.GetContent(), "undefined: Parse")
	}
}
