package toolexec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

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
