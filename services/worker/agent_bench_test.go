package worker

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/topology"
)

// instantModel answers at once: calls read_file until the task has made
// calls tool calls, then finishes. It stands for a model that takes no
// time, so that what is measured is the worker's own work.
type instantModel struct{ calls int }

func (m *instantModel) Complete(_ context.Context, req *llm.Request) (*llm.Response, error) {
	n := 0
	for _, msg := range req.Messages {
		n += len(msg.ToolCalls)
	}
	call := llm.ToolCall{ID: "c" + strconv.Itoa(n), Name: "read_file", Arguments: `{"path":"calc.go"}`}
	if n+1 >= m.calls {
		call = llm.ToolCall{ID: "c" + strconv.Itoa(n), Name: "finish", Arguments: `{"summary":"done"}`}
	}
	return &llm.Response{ToolCalls: []llm.ToolCall{call}, Usage: llm.Usage{InputTokens: 2000, OutputTokens: 20}}, nil
}

// BenchmarkAgentToolCallOverhead is what the Engineer's loop costs per tool
// call in the worker, without the model's time: the loop (masking,
// argument checks), the tool (read_file of a small file), redaction, the
// report's record, and the two events each call puts on the session's
// stream over a real NATS server.
func BenchmarkAgentToolCallOverhead(b *testing.B) {
	repo, base := brokenRepo(b)
	s := pipelineService(b)
	s.bus = testenv.NATS(b)
	if err := topology.EnsureEvents(context.Background(), s.bus); err != nil {
		b.Fatal(err)
	}
	const calls = 60
	s.SetModel(&instantModel{calls: calls})
	d := repoTask(b, repo, base, &orchestratorv1.Node{Id: "n", Prompt: "Read calc.go."})
	d.TenantId, d.UserId, d.SessionId = "t1", "u1", "s1"
	tr := s.newTaskRun("engineer", d)
	if failure, _ := tr.prepare(context.Background()); failure != "" {
		b.Fatal(failure)
	}
	b.Cleanup(tr.close)
	var agentTime time.Duration
	b.ResetTimer()
	for b.Loop() {
		a, err := tr.newAgent(context.Background(), "engineer", nil)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		res, err := a.run(context.Background(), "Read calc.go.")
		agentTime += time.Since(start)
		a.close()
		if err != nil || res.ToolCalls != calls {
			b.Fatalf("%v: %d calls", err, res.ToolCalls)
		}
	}
	perCall := agentTime / time.Duration(b.N*calls)
	b.ReportMetric(float64(perCall.Microseconds()), "µs/toolcall")
	fmt.Printf("agent loop overhead per tool call (loop, tool, redaction, record, two NATS events): %s\n", perCall)
}
