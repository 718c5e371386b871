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

// Spec E-09: a run that fails records each failed node in the Archivalist
// (category failure): the task, its files, its error tier and error, with
// secrets scrubbed; a node that succeeded is not recorded.
func TestFailedRunRecordsItsFailures(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	ctx := userCtx("t1")
	session := ids.New()
	noRetry := &orchestratorv1.RetryPolicy{Max: 0}
	ok, bad := cmd("ok", "true"), cmd("parse", "false")
	bad.Name, bad.Files, bad.Retry, ok.Retry = "Rewrite the calc parser", []string{"pkg/calc/parser.go"}, noRetry, noRetry
	bad.Edits = []*orchestratorv1.FileEdit{{Path: "pkg/calc/lex.go", Content: "package calc"}}
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{SessionId: session, Dag: dagOf(ok, bad)})
	runID := strings.TrimPrefix(run.GetName(), "runs/")
	h.tasks(t, "engineer", 2)
	h.sendResult(t, "t1", runID, "ok", 1, 0, "", "")
	awsID := "AKIA" + "Q7ZP2LK3XW4RT6VN"
	h.publishResult(t, "", &taskv1.TaskResult{TenantId: "t1", RunId: runID, NodeId: "parse", Attempt: 1, ExitCode: 2,
		Error: "parser.go:4: undefined: Parse (key " + awsID + ")", Stderr: "build failed\nparser.go:4: undefined: Parse",
		Duration: durationpb.New(time.Second), WorkerId: "test-worker"})
	h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_FAILED)

	require.NoError(t, topology.EnsureAgents(context.Background(), h.bus))
	inbox, err := h.bus.EnsureConsumer(context.Background(), topology.InboxConsumer(h.bus, topology.AgentArchivalist, natsx.ConsumerSpec{}))
	require.NoError(t, err)
	var failures []*messagev1.Envelope
	var categories []string
	testenv.Consume(t, inbox, 10, waitFor, func(env *messagev1.Envelope) {
		categories = append(categories, env.GetStoreRequest().GetCategory())
		if env.GetStoreRequest().GetCategory() == orchestrator.CategoryFailure {
			failures = append(failures, env)
		}
	}, func() bool { return len(failures) > 0 && len(categories) >= 2 })
	require.Len(t, failures, 1, "only the failed node: %v", categories)
	rec := failures[0]
	require.Equal(t, messagev1.MessageType_MESSAGE_TYPE_STORE_REQUEST, rec.GetType())
	require.Equal(t, runID+":parse:1:failure", rec.GetId(), "a re-sent record is a duplicate")
	require.Equal(t, session, rec.GetSessionId())
	req := rec.GetStoreRequest()
	require.Equal(t, "Failed: Rewrite the calc parser ("+run.GetName()+", node parse) in pkg/calc/parser.go, pkg/calc/lex.go", req.GetTitle())
	for _, want := range []string{
		"Task Rewrite the calc parser failed after attempt 1 (exit 2, error tier permanent).",
		"Run: " + run.GetName(), "Node: parse", "Error tier: permanent",
		"Files: pkg/calc/parser.go, pkg/calc/lex.go", "Area: pkg calc parser go lex",
		"## Error\n\nparser.go:4: undefined: Parse", "## Command\n\nfalse", "## End of its output\n\nbuild failed",
	} {
		require.Contains(t, req.GetContent(), want)
	}
	require.NotContains(t, req.GetContent(), awsID, "secrets are scrubbed")
}
