package gate_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/breaker"
	"sylk.dev/sylk/pkg/llm/gate"
	"sylk.dev/sylk/pkg/llm/internal/fake"
	"sylk.dev/sylk/pkg/llm/provider/openai"
	"sylk.dev/sylk/pkg/testenv"
)

// A half-open probe whose call ends without saying anything about the
// provider's health (a bad request, a caller that gave up) hands the probe
// on: the next call probes at once instead of failing fast until the probe
// times out and the breaker opens again.
func TestProbeWithoutVerdictIsHandedOn(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 1)
	srv := &server{handle: func(w http.ResponseWriter, r *http.Request, text string, n int) {
		switch text {
		case "hold":
			arrived <- struct{}{}
			<-r.Context().Done()
		case "bad":
			fake.JSONError(w, 502, "", `{"error":{"message":"bad gateway","type":"server_error"}}`)
		case "invalid":
			fake.JSONError(w, 400, "", `{"error":{"message":"invalid request","type":"invalid_request_error"}}`)
		default:
			ok(w, text)
		}
	}}
	hs := fake.Server(t, srv.serve)
	reg, err := llm.NewRegistry(llm.OpenAI, openai.New(llm.ProviderOptions{APIKey: "k", BaseURL: hs.URL + "/v1", HTTPClient: hs.Client()}))
	require.NoError(t, err)
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	settings := breaker.Settings{ConsecutiveFailures: 1, FailureRate: 1, Window: 20, Cooldown: 30 * time.Second, SuccessThreshold: 1, ProbeTimeout: 2 * time.Minute}
	g, err := gate.New(gate.DefaultConfig(), gate.Deps{Providers: reg, Redis: testenv.Redis(t), MaxTokens: 64, Clock: clock,
		Breaker: func(string) breaker.Settings { return settings }, Retry: llm.RetryPolicies{}})
	require.NoError(t, err)
	t.Cleanup(g.Close)
	ctx := t.Context()

	open := func() {
		t.Helper()
		_, err := g.Complete(ctx, req("bad", "engineer", false))
		require.Equal(t, 502, llm.StatusOf(err), "%v", err)
		_, err = g.Complete(ctx, req("good", "engineer", false))
		require.ErrorIs(t, err, gate.ErrCircuitOpen)
		now.Add(int64(settings.Cooldown + time.Second))
	}

	open()
	_, err = g.Complete(ctx, req("invalid", "engineer", false))
	require.Equal(t, 400, llm.StatusOf(err), "the probe")
	resp, err := g.Complete(ctx, req("good", "engineer", false))
	require.NoError(t, err, "the next call probes")
	require.Equal(t, "done good", resp.Content)
	closed := func() bool {
		st, err := g.Breakers().State(ctx, llm.OpenAI)
		require.NoError(t, err)
		return st == breaker.Closed
	}
	require.Eventually(t, closed, 10*time.Second, time.Millisecond, "the probe's success closes the breaker")

	open()
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := g.Complete(cctx, req("hold", "engineer", false))
		done <- err
	}()
	<-arrived
	cancel()
	require.ErrorIs(t, <-done, context.Canceled, "the probe's caller gave up")
	_, err = g.Complete(ctx, req("good", "engineer", false))
	require.NoError(t, err, "the next call probes")
	require.Eventually(t, closed, 10*time.Second, time.Millisecond)
}
