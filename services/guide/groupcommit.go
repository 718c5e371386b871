package guide

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// groupCommitter stores messages in group commits: writer goroutines each
// take the requests waiting and send their writes in one round trip,
// pipelined between BEGIN and COMMIT, so that one commit (and one wait for
// the disk) serves many messages and the routing path holds no pooled
// connection while it waits. A request is answered only after the
// transaction holding it has committed. Every check a request makes there
// fails on the server (the session is active, the request id is new), so a
// failing request aborts the transaction before its COMMIT; the group is
// then run again, each request in a transaction of its own, so one
// request's error never fails another.
//
// Writers never deadlock one another: a group runs its requests in the
// order of their lock keys (tenant and session, whose row each request
// updates), and its routing counts are added up and written at the end to
// the writer's own counter shard.
type groupCommitter struct {
	db       *pgxpool.Pool
	async    bool
	maxBatch int
	outcomes *prometheus.CounterVec // messages by outcome: grouped, alone
	jobs     chan *commitJob
	started  atomic.Bool
	stopped  chan struct{}
}

// commitFunc does a request's writes in tx, adding its routing decisions
// to counts. It runs when the request's group failed, so it must derive
// every result from the transaction it is given and report why it fails.
type commitFunc func(ctx context.Context, tx pgx.Tx, counts *routeCounts) error

// pipeFunc queues a request's writes on its group's batch: the statements
// its commitFunc runs (writes.go). The batch's results are not read: a
// write that must not happen (to a session that is not active, a request
// id stored before) must fail its statement.
type pipeFunc func(ctx context.Context, b *pgx.Batch, counts *routeCounts) error

type commitJob struct {
	ctx  context.Context
	key  string // the lock order
	fn   commitFunc
	pipe pipeFunc
	done chan error
}

// Group commit limits.
const (
	defaultCommitWriters = 2
	maxCommitBatch       = 64
)

func newGroupCommitter(db *pgxpool.Pool, async bool, outcomes *prometheus.CounterVec) *groupCommitter {
	return &groupCommitter{db: db, async: async, maxBatch: maxCommitBatch, outcomes: outcomes,
		jobs: make(chan *commitJob, 4*maxCommitBatch), stopped: make(chan struct{})}
}

// do runs a request's writes in a group commit (queued by pipe), or in a
// transaction of its own (by fn) when the writers are not running (before
// Run, or once Run has stopped them while the server still drains its
// calls) or its group failed. It returns fn's error or the commit's.
func (g *groupCommitter) do(ctx context.Context, key string, fn commitFunc, pipe pipeFunc) error {
	if !g.started.Load() {
		return g.alone(ctx, fn)
	}
	j := &commitJob{ctx: ctx, key: key, fn: fn, pipe: pipe, done: make(chan error, 1)}
	select {
	case g.jobs <- j:
	case <-g.stopped:
		return g.alone(ctx, fn)
	case <-ctx.Done():
		return ctx.Err()
	}
	// Once queued, the job's outcome is awaited even if the caller gives up,
	// so that a message is never reported lost while it is being stored.
	var err error
	select {
	case err = <-j.done:
	case <-g.stopped:
		select {
		case err = <-j.done:
		default:
			err = errNotTaken
		}
	}
	if errors.Is(err, errNotTaken) {
		return g.alone(ctx, fn)
	}
	return err
}

// errNotTaken is the outcome of a job no writer took before the writers
// stopped: nothing was stored, and the request is stored on its own.
var errNotTaken = errors.New("the group commit writers stopped before taking the job")

// start runs n writers until ctx is done.
func (g *groupCommitter) start(ctx context.Context, n int) error {
	g.started.Store(true)
	var wg sync.WaitGroup
	for i := range min(n, routingCountShards) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.run(ctx, i)
		}()
	}
	wg.Wait()
	close(g.stopped)
	return nil
}

// alone runs fn in its own transaction.
func (g *groupCommitter) alone(ctx context.Context, fn commitFunc) error {
	return pgx.BeginFunc(ctx, g.db, func(tx pgx.Tx) error {
		if g.async {
			if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit TO OFF`); err != nil {
				return err
			}
		}
		var counts routeCounts
		if err := fn(ctx, tx, &counts); err != nil {
			return err
		}
		return routeCountWrites(counts.m, aloneShard()).send(ctx, tx)
	})
}

// run is one writer; it returns when ctx is done, after handing the jobs
// still queued back to their requests, which store them alone.
func (g *groupCommitter) run(ctx context.Context, shard int) {
	batch := make([]*commitJob, 0, g.maxBatch)
	for {
		batch = batch[:0]
		select {
		case <-ctx.Done():
			for {
				select {
				case j := <-g.jobs:
					j.done <- errNotTaken
				default:
					return
				}
			}
		case j := <-g.jobs:
			batch = append(batch, j)
		}
	fill:
		for len(batch) < g.maxBatch {
			select {
			case j := <-g.jobs:
				batch = append(batch, j)
			default:
				break fill
			}
		}
		g.commit(ctx, batch, shard)
	}
}

// commit runs batch in one transaction, sent in one round trip; on any
// failure, each job runs again alone.
func (g *groupCommitter) commit(ctx context.Context, batch []*commitJob, shard int) {
	live := batch[:0:0]
	for _, j := range batch {
		if err := j.ctx.Err(); err != nil {
			j.done <- err
			continue
		}
		live = append(live, j)
	}
	if len(live) == 0 {
		return
	}
	wctx := context.WithoutCancel(ctx)
	slices.SortStableFunc(live, func(a, b *commitJob) int { return strings.Compare(a.key, b.key) })
	if err := g.pipelined(wctx, live, shard); err == nil {
		g.outcomes.WithLabelValues("grouped").Add(float64(len(live)))
		for _, j := range live {
			j.done <- nil
		}
		return
	}
	g.outcomes.WithLabelValues("alone").Add(float64(len(live)))
	for _, j := range live {
		j.done <- g.alone(context.WithoutCancel(j.ctx), j.fn)
	}
}

// pipelined sends BEGIN, the jobs' writes, their routing counts and COMMIT
// as one batch. Should a statement fail, the server skips the rest, COMMIT
// too, and the pool discards the connection with its aborted transaction.
func (g *groupCommitter) pipelined(ctx context.Context, live []*commitJob, shard int) error {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	if g.async {
		b.Queue(`SET LOCAL synchronous_commit TO OFF`)
	}
	var counts routeCounts
	for _, j := range live {
		// A job runs with its request's values (identity, trace) but not
		// its cancellation: the group's other members must not fail
		// because one caller went away.
		if err := j.pipe(context.WithoutCancel(j.ctx), b, &counts); err != nil {
			return err
		}
	}
	routeCountWrites(counts.m, shard).queue(b)
	b.Queue("COMMIT").Exec(func(tag pgconn.CommandTag) error {
		if tag.String() != "COMMIT" {
			return fmt.Errorf("transaction ended with %s", tag)
		}
		return nil
	})
	return g.db.SendBatch(ctx, b).Close()
}
