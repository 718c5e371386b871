package guide

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/logx"
)

// A message is committed before its events and envelope are published, so
// a Guide that stops between the two, or a bus that is down, leaves it
// stored but not routed. Each user message is stored with a row in the
// outbox table, deleted (in batches, dispatchMarks) once everything it
// publishes is on the bus. The outbox relay publishes the messages whose
// row outlived OutboxGrace, as stored and under the same de-duplication ids:
// a copy that did reach the bus is dropped by the stream. It looks only at
// messages younger than outboxWindow, inside the streams' 2-minute
// duplicate window, so that a copy whose row was not deleted in time is
// never delivered twice; older ones are left to the request timeout.

// outboxWindow is how far back the relay looks.
const outboxWindow = 90 * time.Second

// outboxBatch bounds the messages one relay pass publishes.
const outboxBatch = 200

// relay publishes undispatched messages every OutboxInterval until ctx is
// done.
func (s *Service) relay(ctx context.Context) error {
	t := time.NewTicker(s.cfg.OutboxInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if n, err := s.relayOnce(ctx); err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "relay undispatched messages", logx.Err(err))
		} else if n > 0 {
			s.log.InfoContext(ctx, "published stored messages that had not reached the bus", slog.Int("messages", n))
		}
	}
}

// relayOnce publishes the messages stored between outboxWindow and
// OutboxGrace ago that are still in the outbox, oldest first, and says how
// many it published.
func (s *Service) relayOnce(ctx context.Context) (int, error) {
	now := s.now()
	rows, err := s.db.Query(ctx, `SELECT messages.tenant_id, user_id, `+messageColumns+`, envelope
		FROM outbox JOIN messages ON messages.id = outbox.message_id AND messages.tenant_id = outbox.tenant_id
		WHERE outbox.create_time < $1 AND outbox.create_time > $2
		ORDER BY outbox.create_time LIMIT $3`, now.Add(-s.cfg.OutboxGrace), now.Add(-outboxWindow), outboxBatch)
	if err != nil {
		return 0, fmt.Errorf("find undispatched messages: %w", err)
	}
	type stored struct {
		who identity.Identity
		m   message
	}
	todo, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (stored, error) {
		var st stored
		err := row.Scan(append([]any{&st.who.TenantID, &st.who.UserID}, append(messageDest(&st.m), &st.m.Envelope)...)...)
		st.m.Undispatched = true
		return st, err
	})
	if err != nil {
		return 0, fmt.Errorf("read undispatched messages: %w", err)
	}
	n := 0
	for _, st := range todo {
		if ctx.Err() != nil {
			break
		}
		if _, err := s.replay(ctx, st.who, st.m); err != nil {
			return n, fmt.Errorf("publish message %s: %w", st.m.ID, err)
		}
		n++
	}
	return n, nil
}

// dispatchMarks deletes the outbox rows of messages whose publications are
// all on the bus, in batches. The row spares a retried request (same
// request id), and the outbox relay (outbox.go), from republishing
// publications the streams would drop as duplicates, so it is deleted after
// the request has been answered, many messages to one statement, without
// waiting for the disk; a row left behind costs a duplicate the streams drop.
type dispatchMarks struct {
	mu      sync.Mutex
	pending map[string][]string // tenant -> message ids
	n       int
}

// maxPendingMarks bounds the outbox rows waiting for deletion; beyond it
// the oldest are dropped (the outbox relay or a retry then republishes
// duplicates, which the streams drop).
const maxPendingMarks = 100000

func newDispatchMarks() *dispatchMarks {
	return &dispatchMarks{pending: map[string][]string{}}
}

func (d *dispatchMarks) add(tenant, id string) {
	d.mu.Lock()
	if d.n >= maxPendingMarks {
		clear(d.pending)
		d.n = 0
	}
	d.pending[tenant] = append(d.pending[tenant], id)
	d.n++
	d.mu.Unlock()
}

func (d *dispatchMarks) take() map[string][]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.n == 0 {
		return nil
	}
	out := d.pending
	d.pending, d.n = map[string][]string{}, 0
	return out
}

// marksInterval is how often the outbox rows are deleted: a batch a tenth
// of a second costs one round trip however many messages it holds.
const marksInterval = 100 * time.Millisecond

// run deletes the outbox rows every marksInterval until ctx is done, then
// deletes what is left.
func (d *dispatchMarks) run(ctx context.Context, db *pgxpool.Pool, log *slog.Logger, now func() time.Time) error {
	t := time.NewTicker(marksInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			d.flush(fctx, db, log, now())
			cancel()
			return nil
		case <-t.C:
			d.flush(ctx, db, log, now())
		}
	}
}

// flush deletes the pending outbox rows in one round trip: a transaction
// that does not wait for the disk, every tenant's rows at once.
func (d *dispatchMarks) flush(ctx context.Context, db *pgxpool.Pool, log *slog.Logger, at time.Time) {
	batch := d.take()
	if batch == nil {
		return
	}
	var tenants, ids []string
	for tenant, list := range batch {
		for _, id := range list {
			tenants, ids = append(tenants, tenant), append(ids, id)
		}
	}
	var b pgx.Batch
	b.Queue(`BEGIN`)
	b.Queue(`SET LOCAL synchronous_commit TO OFF`)
	b.Queue(`DELETE FROM outbox o USING unnest($1::text[], $2::uuid[]) AS u(tenant_id, id)
		WHERE o.message_id = u.id AND o.tenant_id = u.tenant_id`, tenants, ids)
	b.Queue(`COMMIT`)
	if err := db.SendBatch(ctx, &b).Close(); err != nil && ctx.Err() == nil {
		log.WarnContext(ctx, "clear dispatched messages from the outbox", slog.Int("messages", len(ids)), logx.Err(err))
	}
}
