package guide

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	"sylk.dev/sylk/pkg/testenv"
)

// TestGroupCommit sends many messages at once while the Guide runs, so that
// they are stored in group commits: every message to an active session is
// stored, routed and counted exactly once, a message to a suspended session
// in the same groups fails alone with FAILED_PRECONDITION, and a retried
// request id is answered with its first outcome.
func TestGroupCommit(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t, Config{}, true)
	ctx := as("t1", "u1")
	var sessions []*guidev1.Session
	for i := range 8 {
		sessions = append(sessions, f.createSession(t, ctx, fmt.Sprintf("s%d", i)))
	}
	suspended := f.createSession(t, ctx, "suspended")
	_, err := f.svc.SuspendSession(ctx, &guidev1.SuspendSessionRequest{Name: suspended.GetName()})
	require.NoError(t, err)
	reader := inboxReader(t, f.bus, "architect")

	const perSession = 12
	var wg sync.WaitGroup
	errs := make(chan error, len(sessions)*perSession+perSession)
	corr := make(chan string, len(sessions)*perSession)
	for _, s := range sessions {
		for i := range perSession {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := f.svc.SendMessage(ctx, &guidev1.SendMessageRequest{Parent: s.GetName(),
					Text: fmt.Sprintf("fix typo in README line %d", i), RequestId: fmt.Sprintf("r%d", i)})
				if err != nil {
					errs <- err
					return
				}
				corr <- resp.GetCorrelationId()
			}()
		}
	}
	for i := range perSession {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := f.svc.SendMessage(ctx, &guidev1.SendMessageRequest{Parent: suspended.GetName(), Text: fmt.Sprintf("fix typo %d", i)})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	close(corr)
	refused := 0
	for err := range errs {
		testenv.RequireReason(t, err, codes.FailedPrecondition, reasonSessionNotActive, "session is suspended")
		refused++
	}
	require.Equal(t, perSession, refused)

	want := map[string]bool{}
	for c := range corr {
		want[c] = true
	}
	require.Len(t, want, len(sessions)*perSession)
	for range want {
		env := nextEnvelope(t, reader)
		require.True(t, want[env.GetCorrelationId()], "unexpected envelope %s", env.GetCorrelationId())
		delete(want, env.GetCorrelationId())
	}

	for _, s := range sessions {
		msgs, err := f.svc.ListMessages(ctx, &guidev1.ListMessagesRequest{Parent: s.GetName(), PageSize: 100})
		require.NoError(t, err)
		require.Len(t, msgs.GetMessages(), perSession, "each message stored once")
	}
	acc, err := f.svc.GetRoutingAccuracy(ctx, &guidev1.GetRoutingAccuracyRequest{})
	require.NoError(t, err)
	require.EqualValues(t, len(sessions)*perSession, acc.GetRouted(), "each routed message counted once")

	// A retried request id gets its first outcome; nothing is stored again.
	again, err := f.svc.SendMessage(context.WithoutCancel(ctx), &guidev1.SendMessageRequest{Parent: sessions[0].GetName(),
		Text: "fix typo in README line 3", RequestId: "r3"})
	require.NoError(t, err)
	msgs, err := f.svc.ListMessages(ctx, &guidev1.ListMessagesRequest{Parent: sessions[0].GetName(), PageSize: 100})
	require.NoError(t, err)
	require.Len(t, msgs.GetMessages(), perSession)
	found := false
	for _, m := range msgs.GetMessages() {
		found = found || m.GetCorrelationId() == again.GetCorrelationId()
	}
	require.True(t, found)

	// A routed message and a pure command each commit with their group
	// (alone in it here) rather than running again alone: their checks
	// hold on the server.
	grouped := f.svc.metrics.grouped.WithLabelValues("grouped")
	for _, text := range []string{"fix typo in README once more", "/help"} {
		before := testutil.ToFloat64(grouped)
		_, err := f.svc.SendMessage(ctx, &guidev1.SendMessageRequest{Parent: sessions[1].GetName(), Text: text})
		require.NoError(t, err)
		require.Equal(t, before+1, testutil.ToFloat64(grouped), text)
	}
}

// TestGroupCommitMemberFailure commits one group where one request fails:
// the group is rolled back and each request runs again alone, so the
// others are stored and only the failing one reports its error.
func TestGroupCommitMemberFailure(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t, Config{}, false)
	ctx := context.Background()
	_, err := f.db.Exec(ctx, `CREATE TABLE group_commit_probe (id int PRIMARY KEY)`)
	require.NoError(t, err)
	outcomes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "outcomes"}, []string{"outcome"})
	g := newGroupCommitter(f.db, false, outcomes)
	insert := func(id int) commitFunc {
		return func(ctx context.Context, tx pgx.Tx, counts *routeCounts) error {
			counts.add(routeCountKey{"t1", "PROBE", 9})
			_, err := tx.Exec(ctx, `INSERT INTO group_commit_probe (id) VALUES ($1)`, id)
			return err
		}
	}
	piped := func(id int) pipeFunc {
		return func(_ context.Context, b *pgx.Batch, counts *routeCounts) error {
			counts.add(routeCountKey{"t1", "PROBE", 9})
			b.Queue(`INSERT INTO group_commit_probe (id) VALUES ($1)`, id)
			return nil
		}
	}
	jobs := []*commitJob{
		{ctx: ctx, key: "b", fn: insert(1), pipe: piped(1)},
		{ctx: ctx, key: "a", fn: insert(2), pipe: piped(2)},
		{ctx: ctx, key: "c", fn: insert(1), pipe: piped(1)}, // a duplicate
		{ctx: ctx, key: "d", fn: insert(3), pipe: piped(3)},
	}
	for _, j := range jobs {
		j.done = make(chan error, 1)
	}
	g.commit(ctx, jobs, 0)
	var failed int
	for _, j := range jobs {
		if err := <-j.done; err != nil {
			failed++
			require.ErrorContains(t, err, "duplicate key")
		}
	}
	require.Equal(t, 1, failed)
	require.EqualValues(t, 4, testutil.ToFloat64(outcomes.WithLabelValues("alone")), "the group ran again, each request alone")
	var n int
	require.NoError(t, f.db.QueryRow(ctx, `SELECT count(*) FROM group_commit_probe`).Scan(&n))
	require.Equal(t, 3, n)
	var routed int64
	require.NoError(t, f.db.QueryRow(ctx, `SELECT sum(routed) FROM routing_counts WHERE tenant_id = 't1' AND intent_type = 'PROBE'`).Scan(&routed))
	require.EqualValues(t, 3, routed, "the failed request's count was rolled back with it")

	// A group without failures commits once, counted on the writer's shard.
	ok := []*commitJob{{ctx: ctx, key: "x", fn: insert(10), pipe: piped(10)}, {ctx: ctx, key: "y", fn: insert(11), pipe: piped(11)}}
	for _, j := range ok {
		j.done = make(chan error, 1)
	}
	g.commit(ctx, ok, 1)
	for _, j := range ok {
		require.NoError(t, <-j.done)
	}
	require.EqualValues(t, 2, testutil.ToFloat64(outcomes.WithLabelValues("grouped")), "committed as one group")
	require.NoError(t, f.db.QueryRow(ctx, `SELECT routed FROM routing_counts WHERE tenant_id = 't1' AND intent_type = 'PROBE' AND shard = 1`).Scan(&routed))
	require.EqualValues(t, 2, routed)
}

// TestGroupCommitAfterWritersStop stores a message sent once Run has
// stopped the writers, as the server drains its calls on shutdown (and
// serves through -shutdown-delay): it is stored alone, not refused.
func TestGroupCommitAfterWritersStop(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t, Config{}, false)
	ctx := context.Background()
	_, err := f.db.Exec(ctx, `CREATE TABLE group_commit_stop_probe (id int PRIMARY KEY)`)
	require.NoError(t, err)
	outcomes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "outcomes"}, []string{"outcome"})
	g := newGroupCommitter(f.db, false, outcomes)
	wctx, stop := context.WithCancel(ctx)
	stop()
	require.NoError(t, g.start(wctx, 2))
	err = g.do(ctx, "k", func(ctx context.Context, tx pgx.Tx, _ *routeCounts) error {
		_, err := tx.Exec(ctx, `INSERT INTO group_commit_stop_probe (id) VALUES (1)`)
		return err
	}, func(_ context.Context, b *pgx.Batch, _ *routeCounts) error {
		b.Queue(`INSERT INTO group_commit_stop_probe (id) VALUES (1)`)
		return nil
	})
	require.NoError(t, err)
	var n int
	require.NoError(t, f.db.QueryRow(ctx, `SELECT count(*) FROM group_commit_stop_probe`).Scan(&n))
	require.Equal(t, 1, n)
}
