package usage_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/migrations"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/usage"
	"sylk.dev/sylk/pkg/testenv"
)

func TestRecordAndReport(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, _ := testenv.Postgres(t, "llm", migrations.FS("llm"))
	s := usage.New(pool)
	day := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	recs := []llm.UsageRecord{
		{At: day, Attribution: llm.Attribution{TenantID: "t1", SessionID: "s1", AgentType: "engineer"}, Provider: "anthropic", Model: "claude-sonnet-4-5", InputTokens: 1000, OutputTokens: 500, CostUSD: 0.0105, Latency: 200 * time.Millisecond, Outcome: "ok"},
		{At: day.Add(time.Hour), Attribution: llm.Attribution{TenantID: "t1", SessionID: "s1", AgentType: "architect"}, Provider: "anthropic", Model: "claude-opus-4-1", InputTokens: 100, OutputTokens: 100, CostUSD: 0.009, Latency: 400 * time.Millisecond, Outcome: "ok"},
		{At: day.Add(24 * time.Hour), Attribution: llm.Attribution{TenantID: "t1", SessionID: "s2", AgentType: "engineer"}, Provider: "openai", Model: "gpt-4.1", InputTokens: 10, OutputTokens: 20, CostUSD: 0.0002, Outcome: "ok"},
		{At: day, Attribution: llm.Attribution{TenantID: "t2", SessionID: "x"}, Provider: "openai", Model: "gpt-4.1", InputTokens: 999, Outcome: "ok"},
	}
	for _, r := range recs {
		require.NoError(t, s.Record(ctx, r))
	}
	rep, err := s.Report(ctx, usage.Query{Tenant: "t1", GroupBy: []string{usage.ByProvider, usage.ByModel}})
	require.NoError(t, err)
	require.Equal(t, int64(3), rep.Total.Requests, "tenant scoped")
	require.Equal(t, int64(1110), rep.Total.InputTokens)
	require.InDelta(t, 0.0197, rep.Total.CostUSD, 1e-9)
	require.Len(t, rep.Rows, 3)
	require.Equal(t, map[string]string{"provider": "anthropic", "model": "claude-opus-4-1"}, rep.Rows[0].Group)

	rep, err = s.Report(ctx, usage.Query{Tenant: "t1", GroupBy: []string{usage.ByPeriod, usage.ByAgent}, Period: "day"})
	require.NoError(t, err)
	require.Equal(t, []map[string]string{
		{"period": "2026-11-20T00:00:00Z", "agent": "architect"},
		{"period": "2026-11-20T00:00:00Z", "agent": "engineer"},
		{"period": "2026-11-21T00:00:00Z", "agent": "engineer"},
	}, []map[string]string{rep.Rows[0].Group, rep.Rows[1].Group, rep.Rows[2].Group})

	rep, err = s.Report(ctx, usage.Query{Tenant: "t1", SessionID: "s1", GroupBy: []string{usage.BySession}})
	require.NoError(t, err)
	require.Len(t, rep.Rows, 1)
	require.Equal(t, int64(2), rep.Rows[0].Requests)
	require.InDelta(t, 300, rep.Rows[0].AvgLatencyMs, 1e-9)

	rep, err = s.Report(ctx, usage.Query{Tenant: "t1", Start: day.Add(12 * time.Hour)})
	require.NoError(t, err)
	require.Equal(t, int64(1), rep.Total.Requests)

	_, err = s.Report(ctx, usage.Query{Tenant: "t1", GroupBy: []string{"colour"}})
	require.ErrorIs(t, err, usage.ErrInvalid)
	_, err = s.Report(ctx, usage.Query{Tenant: "t1", Period: "decade"})
	require.ErrorIs(t, err, usage.ErrInvalid)
}

func TestRecordBatch(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, _ := testenv.Postgres(t, "llm", migrations.FS("llm"))
	s := usage.New(pool)
	var recs []llm.UsageRecord
	for i := range 300 {
		recs = append(recs, llm.UsageRecord{Attribution: llm.Attribution{TenantID: "t1", UserID: fmt.Sprint("u", i%2), SessionID: "s1", AgentType: "architect"},
			Provider: "local", Model: "local", InputTokens: i, OutputTokens: 1, Outcome: "ok"})
	}
	require.NoError(t, s.RecordBatch(ctx, recs))
	require.NoError(t, s.RecordBatch(ctx, nil))
	rep, err := s.Report(ctx, usage.Query{Tenant: "t1", GroupBy: []string{usage.ByAgent}})
	require.NoError(t, err)
	require.Equal(t, int64(300), rep.Total.Requests)
	require.Equal(t, int64(299*300/2), rep.Total.InputTokens)
	rep, err = s.Report(ctx, usage.Query{Tenant: "t1", UserID: "u1", GroupBy: []string{usage.ByUser}})
	require.NoError(t, err)
	require.Equal(t, int64(150), rep.Total.Requests)
	require.Equal(t, []usage.Row{{Group: map[string]string{"user": "u1"}, Requests: 150, InputTokens: 150 * 150,
		OutputTokens: 150, AvgLatencyMs: 0}}, rep.Rows)
}
