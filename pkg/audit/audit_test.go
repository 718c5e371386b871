package audit_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/migrations"
	"sylk.dev/sylk/pkg/audit"
	"sylk.dev/sylk/pkg/testenv"
)

func newLog(t *testing.T) (*audit.Log, *pgxpool.Pool, string) {
	t.Helper()
	pool, schema := testenv.Postgres(t, "audit", migrations.FS(audit.Schema))
	l, err := audit.New(pool, schema)
	require.NoError(t, err)
	return l, pool, schema
}

func rec(tenant string, i int) audit.Record {
	return audit.Record{TenantID: tenant, Actor: "alice", Action: audit.ActionRunCreated,
		Target: fmt.Sprintf("runs/r%d", i), Details: map[string]string{"session": "s1", "n": fmt.Sprint(i)}}
}

func appendN(t *testing.T, l *audit.Log, tenant string, n int) []audit.Entry {
	t.Helper()
	var out []audit.Entry
	for i := range n {
		e, err := l.Append(t.Context(), rec(tenant, i))
		require.NoError(t, err)
		out = append(out, e)
	}
	return out
}

func TestChainLinksRecords(t *testing.T) {
	t.Parallel()
	l, _, _ := newLog(t)
	es := appendN(t, l, "acme", 3)
	require.Equal(t, int64(1), es[0].Seq)
	require.Equal(t, make([]byte, 32), es[0].PrevHash)
	for i := 1; i < len(es); i++ {
		require.Equal(t, es[i-1].Hash, es[i].PrevHash)
		require.Equal(t, int64(i+1), es[i].Seq)
	}
	rep, err := l.Verify(t.Context(), "acme")
	require.NoError(t, err)
	require.Nil(t, rep.Broken)
	require.Equal(t, int64(3), rep.Checked)
	require.Equal(t, es[2].Hash, rep.HeadHash)

	// Another tenant's chain is its own.
	other := appendN(t, l, "globex", 1)
	require.Equal(t, int64(1), other[0].Seq)
	rep, err = l.Verify(t.Context(), "nobody")
	require.NoError(t, err)
	require.Nil(t, rep.Broken)
	require.Zero(t, rep.Checked)
}

func TestAppendTxCommitsWithTheCaller(t *testing.T) {
	t.Parallel()
	l, pool, _ := newLog(t)
	err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		if _, err := l.AppendTx(t.Context(), tx, rec("acme", 0)); err != nil {
			return err
		}
		return fmt.Errorf("the caller's action failed")
	})
	require.Error(t, err)
	es, _, err := l.List(t.Context(), "acme", audit.Filter{Limit: 10})
	require.NoError(t, err)
	require.Empty(t, es, "a rolled back action leaves no record")
	rep, err := l.Verify(t.Context(), "acme")
	require.NoError(t, err)
	require.Nil(t, rep.Broken)
}

// Appends from many connections at once (as from several services) stay
// one chain.
func TestConcurrentAppendsStayAChain(t *testing.T) {
	t.Parallel()
	l, _, _ := newLog(t)
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := l.Append(context.WithoutCancel(t.Context()), rec("acme", i))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	rep, err := l.Verify(t.Context(), "acme")
	require.NoError(t, err)
	require.Nil(t, rep.Broken)
	require.Equal(t, int64(40), rep.Checked)
}

// Tampering with the table in SQL, as someone with database access would,
// is found: the first broken record and what is wrong with it.
func TestVerifyFindsTampering(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		sql     string
		seq     int64
		problem audit.Problem
	}{
		{"edited target", `UPDATE %s.records SET target = 'runs/other' WHERE seq = 3`, 3, audit.ProblemAltered},
		{"edited details", `UPDATE %s.records SET details = '{"session":"s2","n":"1"}' WHERE seq = 2`, 2, audit.ProblemAltered},
		{"edited time", `UPDATE %s.records SET created_at = created_at - interval '1 hour' WHERE seq = 4`, 4, audit.ProblemAltered},
		{"deleted in the middle", `DELETE FROM %s.records WHERE seq = 3`, 3, audit.ProblemMissing},
		{"deleted the last", `DELETE FROM %s.records WHERE seq = 5`, 5, audit.ProblemTruncated},
		{"reordered", `UPDATE %[1]s.records SET seq = 1000 WHERE seq = 2; UPDATE %[1]s.records SET seq = 2 WHERE seq = 3;
			UPDATE %[1]s.records SET seq = 3 WHERE seq = 1000`, 2, audit.ProblemAltered},
		{"replaced with a rehashed copy", `UPDATE %s.records r SET hash = sha256(r.hash) WHERE seq = 2`, 2, audit.ProblemAltered},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l, pool, schema := newLog(t)
			es := appendN(t, l, "acme", 5)
			_, err := pool.Exec(t.Context(), fmt.Sprintf(tt.sql, pgx.Identifier{schema}.Sanitize()))
			require.NoError(t, err)
			rep, err := l.Verify(t.Context(), "acme")
			require.NoError(t, err)
			require.NotNil(t, rep.Broken)
			require.Equal(t, tt.problem, rep.Broken.Problem)
			require.Equal(t, tt.seq, rep.Broken.Seq)
			if tt.problem == audit.ProblemAltered {
				require.Contains(t, []string{es[tt.seq-1].ID, es[tt.seq].ID}, rep.Broken.ID)
			}
		})
	}
}

func TestListFiltersAndPages(t *testing.T) {
	t.Parallel()
	l, _, _ := newLog(t)
	appendN(t, l, "acme", 5)
	_, err := l.Append(t.Context(), audit.Record{TenantID: "acme", Actor: "bob", Action: audit.ActionKeyRevoked, Target: "api_keys/k1"})
	require.NoError(t, err)

	es, more, err := l.List(t.Context(), "acme", audit.Filter{Limit: 2})
	require.NoError(t, err)
	require.True(t, more)
	require.Equal(t, []int64{6, 5}, []int64{es[0].Seq, es[1].Seq})
	es, more, err = l.List(t.Context(), "acme", audit.Filter{Limit: 10, BeforeSeq: 5})
	require.NoError(t, err)
	require.False(t, more)
	require.Len(t, es, 4)

	es, _, err = l.List(t.Context(), "acme", audit.Filter{Limit: 10, Action: audit.ActionKeyRevoked})
	require.NoError(t, err)
	require.Len(t, es, 1)
	require.Equal(t, "bob", es[0].Actor)
	require.Empty(t, es[0].Details)
	es, _, err = l.List(t.Context(), "acme", audit.Filter{Limit: 10, Actor: "alice"})
	require.NoError(t, err)
	require.Len(t, es, 5)
	require.Equal(t, map[string]string{"session": "s1", "n": "4"}, es[0].Details)

	es, _, err = l.List(t.Context(), "acme", audit.Filter{Limit: 10, Until: time.Now().Add(-time.Hour)})
	require.NoError(t, err)
	require.Empty(t, es)
	es, _, err = l.List(t.Context(), "acme", audit.Filter{Limit: 10, Since: time.Now().Add(-time.Hour)})
	require.NoError(t, err)
	require.Len(t, es, 6)

	es, _, err = l.List(t.Context(), "globex", audit.Filter{Limit: 10})
	require.NoError(t, err)
	require.Empty(t, es, "another tenant's records are not listed")
}

func TestAppendRejectsInvalidRecords(t *testing.T) {
	t.Parallel()
	l, _, _ := newLog(t)
	_, err := l.Append(t.Context(), audit.Record{TenantID: "acme", Action: audit.ActionRunCreated, Target: "runs/x"})
	require.ErrorIs(t, err, audit.ErrInvalid)
	big := map[string]string{}
	for i := range 40 {
		big[fmt.Sprint(i)] = "v"
	}
	_, err = l.Append(t.Context(), audit.Record{TenantID: "acme", Actor: "a", Action: "x", Target: "y", Details: big})
	require.ErrorIs(t, err, audit.ErrInvalid)
}
