package worker

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/pipeline"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/topology"
)

// Spec F-22: a finished pipeline stores the Inspector's findings and the
// Tester's summary in the Archivalist, each under its category.
func TestPipelineStageCheckpoints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	repo, base := gitRepo(t)
	s := pipelineService(t)
	s.bus = testenv.NATS(t)
	require.NoError(t, topology.EnsureAgents(ctx, s.bus))
	node := &orchestratorv1.Node{Id: "sub", Pipeline: true, MaxLoops: 1, Edits: []*orchestratorv1.FileEdit{{
		Path: "calc.go", Content: "package calc\n\n// Add adds.\nfunc Add(a, b int) int { return a - b }\n"}}}
	env := repoTask(t, repo, base, node)
	env.TenantId, env.SessionId = "t1", "s1"
	out, _ := s.runTask(ctx, "engineer", env)
	p, _ := pipelineOf(t, out)
	require.Equal(t, "failed", p.GetState())

	inbox, err := s.bus.EnsureConsumer(ctx, topology.InboxConsumer(s.bus, topology.AgentArchivalist, natsx.ConsumerSpec{}))
	require.NoError(t, err)
	records := map[string]*messagev1.Envelope{}
	testenv.Consume(t, inbox, 10, 10*time.Second, func(e *messagev1.Envelope) { records[e.GetStoreRequest().GetCategory()] = e },
		func() bool { return len(records) == 2 })

	id := pipeline.ID("r1", "sub", 1)
	in := records[CategoryInspectorFindings]
	require.Equal(t, messagev1.MessageType_MESSAGE_TYPE_STORE_REQUEST, in.GetType())
	require.Equal(t, "t1", in.GetTenantId())
	require.Equal(t, "s1", in.GetSessionId())
	require.Equal(t, id+":"+CategoryInspectorFindings, in.GetId())
	require.Equal(t, "Inspector findings of "+id+": passed", in.GetStoreRequest().GetTitle())
	require.Contains(t, in.GetStoreRequest().GetContent(), "- Loops: 1 of 1\n- Pipeline state: failed\n\nValidation: passed\n")
	require.Contains(t, in.GetStoreRequest().GetContent(), "Checks performed:\n- ")

	ts := records[CategoryTesterSummary]
	require.Equal(t, "Tester summary of "+id+": failed", ts.GetStoreRequest().GetTitle())
	text := ts.GetStoreRequest().GetContent()
	require.Contains(t, text, "Last run: go-test, 0 passed, 1 failed, 0 skipped")
	require.Contains(t, text, "Failures:\n- test TestAdd failed (calc_test.go:7): Add(1, 2) != 3")
}
