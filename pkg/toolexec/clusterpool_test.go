package toolexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/redisx"
	"sylk.dev/sylk/pkg/testenv"
)

// Two workers share one cluster pool: the general slots and the user
// reserve hold across both, and a released slot is taken by the other.
func TestClusterPoolSharedAcrossWorkers(t *testing.T) {
	t.Parallel()
	rc := testenv.Redis(t)
	ctx := context.Background()
	a := NewClusterPool(rc, "w", 5, 20, time.Second) // 4 general + 1 reserved
	b := NewClusterPool(rc, "w", 5, 20, time.Second)
	var held []func()
	for _, p := range []*ClusterPool{a, a, b, b} {
		rel, err := p.Acquire(ctx, ClassPipeline, 0, time.Second, nil)
		require.NoError(t, err)
		held = append(held, rel)
	}
	_, err := b.Acquire(ctx, ClassPipeline, 0, 50*time.Millisecond, nil)
	require.ErrorIs(t, err, ErrPoolTimeout)
	user, err := b.Acquire(ctx, ClassUser, 0, 0, nil)
	require.NoError(t, err, "a user call takes the reserve")
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = a.Acquire(cctx, ClassUser, 0, 0, nil)
	require.True(t, errors.Is(err, context.DeadlineExceeded), "every slot is taken: %v", err)
	st, err := a.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, Stats{Total: 5, Reserve: 1, InUse: 5}, st)

	held[0]()
	held[0]() // releasing twice is harmless
	rel, err := b.Acquire(ctx, ClassPipeline, 0, time.Second, nil)
	require.NoError(t, err, "the slot a released goes to b")
	rel()
	user()
	for _, r := range held[1:] {
		r()
	}
	st, err = a.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, st.InUse)
}

// The slots of a worker that died (its leases no longer renewed) come back
// once their leases expire, while a live holder's lease is renewed.
func TestClusterPoolLeasesOfADeadWorkerExpire(t *testing.T) {
	t.Parallel()
	rc := testenv.Redis(t)
	ctx := context.Background()
	const ttl = 400 * time.Millisecond
	p := NewClusterPool(rc, "w", 2, 0, ttl)
	live, err := p.Acquire(ctx, ClassPipeline, 0, time.Second, nil)
	require.NoError(t, err)
	defer live()
	// A dead worker's lease: written like a held one, never renewed.
	require.NoError(t, rc.ZAdd(ctx, p.general, redis.Z{Score: float64(time.Now().Add(ttl).UnixMilli()), Member: "dead"}).Err())
	_, err = p.Acquire(ctx, ClassPipeline, 0, 20*time.Millisecond, nil)
	require.ErrorIs(t, err, ErrPoolTimeout, "both slots are held")
	rel, err := p.Acquire(ctx, ClassPipeline, 0, 10*ttl, nil)
	require.NoError(t, err, "the dead worker's slot comes back")
	defer rel()
	// The live lease outlived its first expiry: it was renewed.
	st, err := p.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, st.InUse)
	score, err := rc.ZScore(ctx, p.general, "dead").Result()
	require.True(t, errors.Is(err, redis.Nil) || score < float64(time.Now().UnixMilli()), "the dead lease is gone")
}

// Two executors (two workers) sharing one cluster pool never run more
// subprocesses together than the cluster allows: pipeline calls stay within
// the general slots, and a user call still runs on the reserve while they
// are all taken. Each command counts the commands running (marker files
// written while it holds its slot) and records any count over the limit.
func TestClusterPoolExecutorsShareTheLimit(t *testing.T) {
	t.Parallel()
	rc := testenv.Redis(t)
	const total, general = 5, 4 // 20% reserve: one slot for user calls
	cfg := testConfig()
	cfg.AcquireTimeout = time.Minute
	cfg.MaxTimeout = time.Minute
	root := t.TempDir()
	var execs []*Executor
	for range 2 {
		b, err := NewBoundary(root)
		require.NoError(t, err)
		e, err := New(cfg, b, NewClusterPool(rc, "w", total, 20, time.Second))
		require.NoError(t, err)
		require.Nil(t, e.Pool(), "the executor uses the cluster pool")
		execs = append(execs, e)
	}
	count := func() int {
		m, err := filepath.Glob(filepath.Join(root, "running.*"))
		require.NoError(t, err)
		return len(m)
	}
	// $1 is the marker name, $2 the limit of commands running at once.
	script := `touch "running.$1"
n=$(ls running.* | wc -l)
[ "$n" -le "$2" ] || touch "over.$1"
while [ ! -e release ]; do sleep 0.01; done
rm "running.$1"`
	run := func(e *Executor, class Class, name string, limit int) error {
		res, err := e.Execute(context.Background(), Invocation{
			Command: "sh", Args: []string{"-c", script, "sh", name, strconv.Itoa(limit)},
			WorkingDir: root, Class: class, Timeout: time.Minute,
		})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("%s: exit %d: %s", name, res.ExitCode, res.Stderr)
		}
		return err
	}
	const calls = 12
	errs := make(chan error, calls)
	for i := range calls {
		go func() { errs <- run(execs[i%2], ClassPipeline, fmt.Sprint("p", i), general) }()
	}
	deadline := time.Now().Add(30 * time.Second)
	for count() < general {
		require.True(t, time.Now().Before(deadline), "the pipeline calls never took the general slots")
		time.Sleep(10 * time.Millisecond) // polling the marker files
	}
	st, err := execs[0].Slots().(*ClusterPool).Stats(context.Background())
	require.NoError(t, err)
	require.Equal(t, general, st.InUse, "pipeline calls hold the general slots only")

	// The reserve: a user call runs while every general slot is held.
	res, err := execs[1].Execute(context.Background(), Invocation{
		Command: "sh", Args: []string{"-c", `ls running.* | wc -l`},
		WorkingDir: root, Class: ClassUser, Timeout: time.Minute,
	})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, res.Stderr)
	require.Equal(t, strconv.Itoa(general), strings.TrimSpace(res.Stdout), "the user call ran beside the held pipeline slots")

	require.NoError(t, os.WriteFile(filepath.Join(root, "release"), nil, 0o600))
	for range calls {
		require.NoError(t, <-errs)
	}
	over, err := filepath.Glob(filepath.Join(root, "over.*"))
	require.NoError(t, err)
	require.Empty(t, over, "more commands ran at once than the cluster allows")
	require.Zero(t, count())
	st, err = execs[0].Slots().(*ClusterPool).Stats(context.Background())
	require.NoError(t, err)
	require.Zero(t, st.InUse, "every slot came back")
}

// redisGate forwards connections to Redis while open; while shut it cuts
// the connections it forwards and refuses new ones, reporting each refusal
// on refused, as a Redis that went down would.
type redisGate struct {
	ln      net.Listener
	target  string
	refused chan struct{}
	mu      sync.Mutex
	shut    bool
	conns   map[net.Conn]struct{}
}

func newRedisGate(t *testing.T, target string) *redisGate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g := &redisGate{ln: ln, target: target, refused: make(chan struct{}, 1024), conns: map[net.Conn]struct{}{}}
	t.Cleanup(func() {
		_ = ln.Close()
		g.setShut(true)
	})
	go g.serve()
	return g
}

func (g *redisGate) serve() {
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return
		}
		g.mu.Lock()
		if g.shut {
			g.mu.Unlock()
			_ = c.Close()
			select {
			case g.refused <- struct{}{}:
			default:
			}
			continue
		}
		up, err := net.Dial("tcp", g.target)
		if err != nil {
			g.mu.Unlock()
			_ = c.Close()
			continue
		}
		g.conns[c], g.conns[up] = struct{}{}, struct{}{}
		g.mu.Unlock()
		go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
		go func() { _, _ = io.Copy(c, up); _ = c.Close() }()
	}
}

// setShut shuts the gate (cutting every forwarded connection) or opens it.
func (g *redisGate) setShut(shut bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.shut = shut
	if shut {
		for c := range g.conns {
			_ = c.Close()
		}
		clear(g.conns)
	}
}

// lockedBuffer is a log destination safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

// With Redis down, calls take this worker's own slots at once (degraded
// mode), bounded by them, and the outage is logged once, however many
// calls meet it; once Redis is back the shared slots are used again, and
// that is logged once too.
func TestClusterPoolDegradesToLocalSlots(t *testing.T) {
	t.Parallel()
	opts, err := redis.ParseURL(testenv.RedisURL())
	require.NoError(t, err)
	gate := newRedisGate(t, opts.Addr)
	opts.Addr = gate.ln.Addr().String()
	ctx := context.Background()
	prefix := "sylktest:" + testenv.ID()
	u := url.URL{Scheme: "redis", Host: opts.Addr, Path: "/" + strconv.Itoa(opts.DB)}
	if opts.Password != "" {
		u.User = url.UserPassword(opts.Username, opts.Password)
	}
	rc, err := redisx.Open(ctx, redisx.Config{URL: u.String(), Prefix: prefix})
	require.NoError(t, err)
	defer rc.Close()
	p := NewClusterPool(rc, "w", 2, 0, time.Second) // local: 2 slots
	var logs lockedBuffer
	p.SetLogger(slog.New(slog.NewJSONHandler(&logs, nil)))

	gate.setShut(true)
	var held []func()
	for range 2 {
		rel, err := p.Acquire(ctx, ClassPipeline, 0, 5*time.Second, nil)
		require.NoError(t, err, "a task starts without Redis")
		held = append(held, rel)
	}
	require.True(t, p.Degraded())
	for range 5 {
		_, err = p.Acquire(ctx, ClassPipeline, 0, 20*time.Millisecond, nil)
		require.ErrorIs(t, err, ErrPoolTimeout, "the local slots bound the calls")
	}
	require.Equal(t, 1, logs.count(`"level":"WARN"`), "one warning per outage: %s", logs.b.String())
	for _, rel := range held {
		rel()
	}
	require.Equal(t, 2, p.Local().Stats().Total)
	require.Zero(t, p.Local().Stats().InUse)

	gate.setShut(false)
	require.Eventually(t, func() bool {
		rel, err := p.Acquire(ctx, ClassPipeline, 0, time.Second, nil)
		require.NoError(t, err)
		defer rel()
		return !p.Degraded()
	}, 10*time.Second, 50*time.Millisecond, "the shared slots are used again")
	rel, err := p.Acquire(ctx, ClassPipeline, 0, time.Second, nil)
	require.NoError(t, err)
	st, err := p.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.InUse, "the slot is the cluster's")
	require.Zero(t, p.Local().Stats().InUse)
	rel()
	require.Equal(t, 1, logs.count(`"level":"INFO"`), "one line when Redis is back: %s", logs.b.String())
	require.Equal(t, 1, logs.count(`"level":"WARN"`))
}
