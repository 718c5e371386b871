// Package llm_bench measures what the LLM gate adds to a model call: the
// whole gate (queue, shared rate limiter, budget reserve and settle, circuit
// breaker, metrics) around the offline local provider, against the provider
// alone, and each Redis check on its own, at an offered load of 2,000
// calls/s against the real Redis.
package llm_bench

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/migrations"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/breaker"
	"sylk.dev/sylk/pkg/llm/budget"
	"sylk.dev/sylk/pkg/llm/gate"
	"sylk.dev/sylk/pkg/llm/provider/local"
	"sylk.dev/sylk/pkg/llm/ratelimit"
	"sylk.dev/sylk/pkg/llm/signal"
	"sylk.dev/sylk/pkg/llm/usage"
	"sylk.dev/sylk/pkg/testenv"
)

const (
	rate    = 2000 // offered calls per second
	workers = 64
)

// -seconds shortens a run while developing (make bench-llm uses 3).
var seconds = flag.Int("seconds", 3, "seconds of offered load per measurement")

// paced offers n calls at rate from a pool of workers (open loop: a call's
// latency counts from its scheduled start, so queueing shows up).
func paced(n int, fn func(i int) error) ([]time.Duration, time.Duration, int64) {
	return pacedAt(rate, n, fn)
}

func pacedAt(rate, n int, fn func(i int) error) ([]time.Duration, time.Duration, int64) {
	lat := make([]time.Duration, n)
	var errs atomic.Int64
	jobs := make(chan int, n)
	start := time.Now()
	interval := time.Second / time.Duration(rate)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				due := start.Add(time.Duration(i) * interval)
				if d := time.Until(due); d > 0 {
					time.Sleep(d)
				}
				if err := fn(i); err != nil {
					errs.Add(1)
				}
				lat[i] = time.Since(due)
			}
		}()
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return lat, time.Since(start), errs.Load()
}

func pct(lat []time.Duration, p float64) time.Duration {
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func report(b *testing.B, name string, lat []time.Duration, elapsed time.Duration, errs int64) (time.Duration, time.Duration) {
	p50, p99 := pct(lat, .5), pct(lat, .99)
	b.Logf("%-34s n=%d  %.0f calls/s  p50 %8s  p99 %8s  errors %d", name, len(lat), float64(len(lat))/elapsed.Seconds(), p50.Round(time.Microsecond), p99.Round(time.Microsecond), errs)
	return p50, p99
}

// timed wraps a provider and writes each call's own duration into the
// *time.Duration its context carries, so the gate's share of a call can be
// measured per call.
type timed struct{ llm.Provider }

type spanKey struct{}

func (t timed) Complete(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	start := time.Now()
	r, err := t.Provider.Complete(ctx, req)
	if d, ok := ctx.Value(spanKey{}).(*time.Duration); ok {
		*d = time.Since(start)
	}
	return r, err
}

func BenchmarkGate(b *testing.B) {
	ctx := context.Background()
	rdb := testenv.Redis(b)
	bus := testenv.NATS(b)
	reg, err := llm.NewRegistry(llm.Local, timed{local.New()})
	require.NoError(b, err)
	cfg := gate.DefaultConfig()
	cfg.PipelineSlots = workers
	cfg.TenantTokens = 1 << 40 // budgets on, never binding: the check runs every call
	cfg.SessionTokens = 1 << 40
	cfg.SoftRequests = 1 << 40
	// Usage records go to PostgreSQL, batched off the call path, as in a
	// deployment.
	pool, _ := testenv.Postgres(b, "llm", migrations.FS("llm"))
	preg := prometheus.NewRegistry()
	g, err := gate.New(cfg, gate.Deps{Providers: reg, Redis: rdb, Signals: signal.NewNATS(bus), Usage: usage.New(pool), Registerer: preg})
	require.NoError(b, err)
	defer g.Close()
	p := local.New()
	n := rate * *seconds
	mkReq := func(i int) *llm.Request {
		return &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "where is ComputeInvoiceTotal defined? please classify"}},
			MaxTokens: 256, Attribution: llm.Attribution{TenantID: "bench", SessionID: fmt.Sprint("s", i%64), TaskID: fmt.Sprint("t", i%512), AgentType: "librarian"}}
	}
	for b.Loop() {
		lat, el, errs := paced(n, func(i int) error { _, err := p.Complete(ctx, mkReq(i)); return err })
		_, baseP99 := report(b, "local provider alone", lat, el, errs)
		baseP50 := pct(lat, .5)
		// Warm connections, scripts and every session's budget lease (a
		// lease idle for -llm.budget.lease-idle goes back to Redis, and the
		// session's next call waits for a new one: counted below).
		for i := range 200 {
			_, _ = g.Complete(ctx, mkReq(i))
		}

		admitted := func(path string) float64 {
			mfs, err := preg.Gather()
			require.NoError(b, err)
			for _, mf := range mfs {
				if mf.GetName() != "sylk_llm_gate_admissions_total" {
					continue
				}
				for _, m := range mf.GetMetric() {
					if m.GetLabel()[0].GetValue() == path {
						return m.GetCounter().GetValue()
					}
				}
			}
			return 0
		}
		local0, redis0 := admitted("local"), admitted("redis")
		leasedLocal0, leasedRedis0 := g.Leases().Stats()
		added := make([]time.Duration, n)
		lat, el, errs = paced(n, func(i int) error {
			var inProvider time.Duration
			start := time.Now()
			_, err := g.Complete(context.WithValue(ctx, spanKey{}, &inProvider), mkReq(i))
			added[i] = time.Since(start) - inProvider
			return err
		})
		gp50, gp99 := report(b, "gate + local provider", lat, el, errs)
		b.Logf("%-34s p50 %8s  p99 %8s  (difference of the two runs' percentiles)", "gate added, run vs run", (gp50 - baseP50).Round(time.Microsecond), (gp99 - baseP99).Round(time.Microsecond))
		b.Logf("%-34s %.0f local, %.0f checked in Redis", "admissions", admitted("local")-local0, admitted("redis")-redis0)
		leasedLocal, leasedRedis := g.Leases().Stats()
		b.Logf("%-34s %d from local leases, %d waited for a lease from Redis", "budget reservations", leasedLocal-leasedLocal0, leasedRedis-leasedRedis0)
		ap50, ap99 := pct(added, .5), pct(added, .99)
		b.Logf("%-34s p50 %8s  p99 %8s  (per call: gate time minus provider time; target p99 < 1ms)", "gate added, per call", ap50.Round(time.Microsecond), ap99.Round(time.Microsecond))

		// The same at a tenth of the load: the latency of one call when the
		// benchmark itself does not saturate the machine.
		low := make([]time.Duration, n/10)
		_, _, lerrs := pacedAt(rate/10, n/10, func(i int) error {
			var inProvider time.Duration
			start := time.Now()
			_, err := g.Complete(context.WithValue(ctx, spanKey{}, &inProvider), mkReq(i))
			low[i] = time.Since(start) - inProvider
			return err
		})
		b.Logf("%-34s p50 %8s  p99 %8s  errors %d", "gate added, per call at 200/s", pct(low, .5).Round(time.Microsecond), pct(low, .99).Round(time.Microsecond), lerrs)
		b.ReportMetric(float64(ap50.Microseconds()), "added-p50-µs")
		b.ReportMetric(float64(ap99.Microseconds()), "added-p99-µs")

		lat, el, errs = paced(n, func(int) error { return rdb.Ping(ctx).Err() })
		report(b, "bare Redis PING (round-trip floor)", lat, el, errs)

		lim := ratelimit.New(rdb, ratelimit.DefaultSettings(), nil)
		lat, el, errs = paced(n, func(int) error { _, _, err := lim.CanProceed(ctx, "bench"); return err })
		_, p99 := report(b, "rate-limit check in Redis (slow path)", lat, el, errs)
		b.ReportMetric(float64(p99.Microseconds()), "ratelimit-p99-µs")

		bud := budget.New(rdb, budget.Limits{Global: 1 << 40, Tenant: 1 << 40, Session: 1 << 40, Task: 1 << 40, Provider: 1 << 40})
		leases := budget.NewLeases(bud, gate.DefaultConfig().LeaseTokens, time.Second, nil)
		require.NoError(b, leases.Load(ctx))
		for i := range 512 { // first leases of every session and task
			r, err := leases.Reserve(ctx, budget.Scope{Tenant: "bench", Session: fmt.Sprint("s", i%64), Task: fmt.Sprint("t", i), Provider: "local"}, 300)
			require.NoError(b, err)
			leases.Settle(r, 0)
		}
		lat, el, errs = paced(n, func(i int) error {
			r, err := leases.Reserve(ctx, budget.Scope{Tenant: "bench", Session: fmt.Sprint("s", i%64), Task: fmt.Sprint("t", i%512), Provider: "local"}, 300)
			if err != nil {
				return err
			}
			leases.Settle(r, 120)
			return nil
		})
		_, p99 = report(b, "budget lease reserve + settle (5)", lat, el, errs)
		b.ReportMetric(float64(p99.Microseconds()), "lease-p99-µs")
		require.NoError(b, leases.Flush(ctx, true))

		lat, el, errs = paced(n, func(i int) error {
			_, err := bud.Reserve(ctx, budget.Scope{Tenant: "bench", Session: fmt.Sprint("s", i%64), Task: fmt.Sprint("t", i%512), Provider: "local"}, 300)
			return err
		})
		_, p99 = report(b, "budget reserve in Redis (5 scopes)", lat, el, errs)
		b.ReportMetric(float64(p99.Microseconds()), "budget-p99-µs")

		lat, el, errs = paced(n, func(i int) error {
			r, err := bud.Reserve(ctx, budget.Scope{Tenant: "bench", Session: fmt.Sprint("s", i%64), Provider: "local"}, 300)
			if err != nil {
				return err
			}
			return bud.Settle(ctx, r, 120)
		})
		report(b, "budget reserve + settle", lat, el, errs)

		br := breaker.New(rdb, func(string) breaker.Settings { return breaker.LLM })
		lat, el, errs = paced(n, func(int) error { _, _, err := br.Allow(ctx, "llm:bench"); return err })
		report(b, "breaker allow", lat, el, errs)
	}
}
