// Package guide_bench measures the Guide's routing through the whole mesh:
// from a REST call to the gateway to the routed envelope landing in the
// target's inbox, per routing tier, beside a raw NATS request-reply and a
// raw gRPC echo measured in the same run on the same machine.
package guide_bench

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/internal/mesh"
	"sylk.dev/sylk/internal/procstat"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/redisx"
	"sylk.dev/sylk/pkg/testenv"
)

// seconds of offered load per measurement; fewer while developing.
var seconds = flag.Int("bench.seconds", 3, "seconds of offered load per measurement")

const (
	warmup    = 200
	workers   = 64
	sessions  = 64
	landingTO = 30 * time.Second
)

type result struct {
	name       string
	n          int
	p50, p99   time.Duration
	throughput float64
	errors     int64
	cpu        string // CPU per message by process, when known
}

// cpuLine says where the machine's CPU went per message.
func cpuLine(shares []procstat.Share, _, busy time.Duration) string {
	if busy <= 0 {
		return ""
	}
	parts := []string{fmt.Sprintf("%s in all", busy.Round(time.Microsecond))}
	for _, sh := range shares {
		if sh.Per >= 10*time.Microsecond {
			name := sh.Name
			if name == procstat.Self {
				name = "this process (mesh and client)"
			}
			parts = append(parts, fmt.Sprintf("%s %s", name, sh.Per.Round(time.Microsecond)))
		}
	}
	return strings.Join(parts, ", ")
}

func summarize(name string, lat []time.Duration, elapsed time.Duration, errs int64) result {
	slices.Sort(lat)
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(float64(len(lat))*p))]
	}
	return result{name: name, n: len(lat), p50: pct(0.50), p99: pct(0.99), throughput: float64(len(lat)) / elapsed.Seconds(), errors: errs}
}

// rates are the offered loads: the target, and a tenth of it, which shows
// the latency of one message when the machine is not saturated.
var rates = []int{1000, 100}

// paced runs n calls of fn at the offered rate with a pool of workers and
// returns each call's latency.
func paced(rate, n int, fn func(i int) (time.Duration, error)) ([]time.Duration, time.Duration, int64) {
	var mu sync.Mutex
	lat := make([]time.Duration, 0, n)
	var errs atomic.Int64
	jobs := make(chan int, n)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				d, err := fn(i)
				if err != nil {
					errs.Add(1)
					continue
				}
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}
		}()
	}
	start := time.Now()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	for i := range n {
		jobs <- i
		<-tick.C
	}
	tick.Stop()
	close(jobs)
	wg.Wait()
	return lat, time.Since(start), errs.Load()
}

type meshEnv struct {
	base, key, natsURL, prefix string
	http                       *http.Client
	sessions                   []string
}

func startMesh(b *testing.B, extra ...string) *meshEnv {
	b.Helper()
	id := testenv.ID()
	schemaPrefix := "bench" + id + "_"
	natsPrefix := "b" + id
	redisPrefix := "sylkbench:" + id
	cfg := testenv.FromFlags[mesh.DevConfig](b, append([]string{
		"-postgres.dsn", testenv.PostgresDSN(), "-postgres.schema-prefix", schemaPrefix,
		"-redis.url", testenv.RedisURL(), "-redis.prefix", redisPrefix,
		"-nats.url", testenv.NATSURL(), "-nats.prefix", natsPrefix,
		"-gateway.listen-address", "127.0.0.1:0", "-log.level", "error",
	}, extra...)...)
	ctx, cancel := context.WithCancel(context.Background())
	d, err := mesh.StartDev(ctx, cfg, io.Discard)
	require.NoError(b, err)
	b.Cleanup(func() {
		cancel()
		_ = d.Wait()
		conn, err := pgx.Connect(context.Background(), testenv.PostgresDSN())
		if err == nil {
			for _, s := range mesh.Schemas {
				_, _ = conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{mesh.Schema(schemaPrefix, s)}.Sanitize()+" CASCADE")
			}
			_ = conn.Close(context.Background())
		}
		if bus, err := natsx.Connect(context.Background(), natsx.Config{URL: testenv.NATSURL(), Prefix: natsPrefix}, logx.Discard(), "bench-cleanup"); err == nil {
			testenv.CleanupStreams(b, bus)
			bus.Conn.Close()
		}
		if rc, err := redisx.Open(context.Background(), redisx.Config{URL: testenv.RedisURL(), Prefix: redisPrefix}); err == nil {
			if keys, _ := rc.Keys(context.Background(), redisPrefix+":*").Result(); len(keys) > 0 {
				rc.Del(context.Background(), keys...)
			}
			_ = rc.Close()
		}
	})
	tr := &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, IdleConnTimeout: time.Minute}
	e := &meshEnv{base: d.GatewayURL, key: d.AdminKey, natsURL: testenv.NATSURL(), prefix: natsPrefix,
		http: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
	for i := range sessions {
		var out struct {
			Session struct{ Name string } `json:"session"`
		}
		require.NoError(b, e.post("/v1/sessions", map[string]any{"displayName": fmt.Sprintf("bench %d", i)}, &out))
		e.sessions = append(e.sessions, out.Session.Name)
	}
	return e
}

func (e *meshEnv) post(path string, body any, out any) error {
	raw, _ := json.Marshal(body)
	req, err := http.NewRequest("POST", e.base+path, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+e.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %d %s", path, resp.StatusCode, data)
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

type sendResult struct {
	CorrelationID string `json:"correlationId"`
	Route         struct {
		Tier   string `json:"tier"`
		Target string `json:"target"`
	} `json:"route"`
}

// landings records when each routed envelope reaches the engineer's inbox
// (a plain NATS subscription sees every publish to the subject; nothing
// consumes the engineer's inbox in the mesh, so the landing is not
// disturbed by a consumer).
type landings struct {
	mu      sync.Mutex
	arrived map[string]time.Time
	waiting map[string]chan time.Time
}

func watchInbox(b *testing.B, e *meshEnv, agent string) *landings {
	nc, err := nats.Connect(e.natsURL)
	require.NoError(b, err)
	b.Cleanup(nc.Close)
	l := &landings{arrived: map[string]time.Time{}, waiting: map[string]chan time.Time{}}
	_, err = nc.Subscribe(e.prefix+".agent."+agent, func(m *nats.Msg) {
		now := time.Now()
		env := &messagev1.Envelope{}
		if proto.Unmarshal(m.Data, env) != nil {
			return
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		if ch, ok := l.waiting[env.GetCorrelationId()]; ok {
			ch <- now
			delete(l.waiting, env.GetCorrelationId())
			return
		}
		l.arrived[env.GetCorrelationId()] = now
	})
	require.NoError(b, err)
	require.NoError(b, nc.Flush())
	return l
}

// wait returns when the envelope with corr landed.
func (l *landings) wait(corr string) (time.Time, error) {
	l.mu.Lock()
	if t, ok := l.arrived[corr]; ok {
		delete(l.arrived, corr)
		l.mu.Unlock()
		return t, nil
	}
	ch := make(chan time.Time, 1)
	l.waiting[corr] = ch
	l.mu.Unlock()
	select {
	case t := <-ch:
		return t, nil
	case <-time.After(landingTO):
		return time.Time{}, fmt.Errorf("envelope %s never landed", corr)
	}
}

// routed measures REST -> inbox for messages made by text(i).
func routed(e *meshEnv, l *landings, wantTier string, text func(i int) string) func(i int) (time.Duration, error) {
	return func(i int) (time.Duration, error) {
		start := time.Now()
		var out sendResult
		if err := e.post("/v1/"+e.sessions[i%len(e.sessions)]+"/messages", map[string]any{"text": text(i)}, &out); err != nil {
			return 0, err
		}
		if out.Route.Tier != wantTier || out.Route.Target != "engineer" {
			return 0, fmt.Errorf("routed by %s to %q, want %s to the engineer", out.Route.Tier, out.Route.Target, wantTier)
		}
		at, err := l.wait(out.CorrelationID)
		if err != nil {
			return 0, err
		}
		return at.Sub(start), nil
	}
}

func rawNATS(b *testing.B, url string) func(i int) (time.Duration, error) {
	nc, err := nats.Connect(url)
	require.NoError(b, err)
	b.Cleanup(nc.Close)
	subject := "benchecho." + testenv.ID()
	_, err = nc.Subscribe(subject, func(m *nats.Msg) { _ = m.Respond(m.Data) })
	require.NoError(b, err)
	require.NoError(b, nc.Flush())
	payload := bytes.Repeat([]byte("x"), 256)
	return func(int) (time.Duration, error) {
		start := time.Now()
		if _, err := nc.Request(subject, payload, 5*time.Second); err != nil {
			return 0, err
		}
		return time.Since(start), nil
	}
}

func rawGRPC(b *testing.B) func(i int) (time.Duration, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(b, err)
	b.Cleanup(func() { _ = conn.Close() })
	client := healthpb.NewHealthClient(conn)
	return func(int) (time.Duration, error) {
		start := time.Now()
		if _, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
			return 0, err
		}
		return time.Since(start), nil
	}
}

// tiers measures the three routing tiers on one mesh.
func tiers(b *testing.B, e *meshEnv, label string) []result {
	l := watchInbox(b, e, "engineer")
	pg, err := pgx.Connect(context.Background(), testenv.PostgresDSN())
	require.NoError(b, err)
	defer func() { _ = pg.Close(context.Background()) }()
	// walLSN is the server's write-ahead log position in bytes: WAL per
	// message, unlike CPU time, does not vary with the machine's load.
	walLSN := func() float64 {
		var lsn float64
		require.NoError(b, pg.QueryRow(context.Background(), `SELECT pg_current_wal_lsn() - '0/0'`).Scan(&lsn))
		return lsn
	}
	help := func(i int) (time.Duration, error) {
		start := time.Now()
		var out sendResult
		if err := e.post("/v1/"+e.sessions[i%len(e.sessions)]+"/messages", map[string]any{"text": "/help"}, &out); err != nil {
			return 0, err
		}
		if out.Route.Tier != "slash_command" {
			return 0, fmt.Errorf("tier %s", out.Route.Tier)
		}
		return time.Since(start), nil
	}
	testenv.Checkpoint(b)
	const cached = "fix typo in README"
	// Prime the route cache.
	var first sendResult
	require.NoError(b, e.post("/v1/"+e.sessions[0]+"/messages", map[string]any{"text": cached}, &first))
	require.Equal(b, "engineer", first.Route.Target)
	_, err = l.wait(first.CorrelationID)
	require.NoError(b, err)
	measures := []struct {
		name string
		fn   func(i int) (time.Duration, error)
	}{
		{"tier 0 slash command (REST round trip)", help},
		{"tier 1 route cache (REST -> inbox)", routed(e, l, "cache", func(int) string { return cached })},
		{"tier 2 classifier (REST -> inbox)", routed(e, l, "classifier", func(i int) string { return fmt.Sprintf("fix typo in README section %d", i) })},
	}
	var out []result
	for _, rate := range rates {
		for j, m := range measures {
			paced(rate, warmup, func(i int) (time.Duration, error) { return m.fn(i + 1_000_000*(j+1)) })
			wal0, cpu0 := walLSN(), procstat.Read()
			lat, elapsed, errs := paced(rate, rate**seconds, func(i int) (time.Duration, error) { return m.fn(i + 10_000_000*rate) })
			r := summarize(fmt.Sprintf("%s @%d/s %s", label, rate, m.name), lat, elapsed, errs)
			r.cpu = cpuLine(procstat.Between(cpu0, procstat.Read(), len(lat)))
			if len(lat) > 0 {
				r.cpu += fmt.Sprintf("; PostgreSQL WAL %.0f bytes", (walLSN()-wal0)/float64(len(lat)))
			}
			out = append(out, r)
		}
	}
	return out
}

func BenchmarkGuideRouting(b *testing.B) {
	durable := startMesh(b)
	var raw []result
	for _, rate := range rates {
		for _, m := range []struct {
			name string
			fn   func(i int) (time.Duration, error)
		}{
			{"raw NATS request-reply", rawNATS(b, durable.natsURL)},
			{"raw gRPC echo (health check)", rawGRPC(b)},
		} {
			paced(rate, warmup, m.fn)
			lat, elapsed, errs := paced(rate, rate**seconds, m.fn)
			raw = append(raw, summarize(fmt.Sprintf("@%d/s %s", rate, m.name), lat, elapsed, errs))
		}
	}
	results := slices.Concat(raw, tiers(b, durable, "[durable]"))
	async := startMesh(b, "-guide.async-commit")
	results = append(results, tiers(b, async, "[async-commit]")...)

	b.Logf("%d s of offered load each, %d workers, %d sessions, GOMAXPROCS %d", *seconds, workers, sessions, runtime.GOMAXPROCS(0))
	b.Logf("%-62s %9s %9s %8s %6s", "path", "p50", "p99", "msg/s", "errors")
	for _, r := range results {
		b.Logf("%-62s %9s %9s %8.0f %6d", r.name, r.p50.Round(10*time.Microsecond), r.p99.Round(10*time.Microsecond), r.throughput, r.errors)
	}
	for _, r := range results {
		key := strings.NewReplacer(" ", "_", "[", "", "]", "", "@", "", "/s", "ps", "(", "", ")", "", ">", "", "-", "").Replace(r.name)
		b.ReportMetric(float64(r.p99.Microseconds())/1000, key+"_p99_ms")
	}
	for _, r := range results[len(raw):] {
		base := raw[0].p99
		if strings.Contains(r.name, "@100/s") {
			base = raw[2].p99
		}
		b.Logf("%s: %s p99 over raw NATS request-reply at the same rate", r.name, (r.p99 - base).Round(10*time.Microsecond))
	}
	b.Logf("CPU per message, by process (the machine has %d CPUs):", runtime.NumCPU())
	for _, r := range results[len(raw):] {
		if r.cpu != "" {
			b.Logf("  %s: %s", r.name, r.cpu)
		}
	}
}
