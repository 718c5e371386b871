package guide

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

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
