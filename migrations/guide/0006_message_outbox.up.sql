-- The outbox: a user message's row stays here from the transaction that
-- stores it until everything it publishes is on the bus (the Guide deletes
-- it then, in batches). A message whose row outlives the grace period is
-- published again by the outbox relay. Messages themselves are never
-- updated, so their rows stay where they were written.
CREATE TABLE outbox (
    message_id   uuid PRIMARY KEY,
    tenant_id    text NOT NULL,
    create_time  timestamptz NOT NULL
);
CREATE INDEX outbox_time_idx ON outbox (create_time);
