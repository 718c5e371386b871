-- The audit log: one hash chain per tenant. Each record's hash covers its
-- fields and the hash of the record before it (pkg/audit), so an edited,
-- deleted or reordered record breaks the chain. heads holds each chain's
-- last record: appends lock it (SELECT ... FOR UPDATE), which serialises
-- the appends of every service to one tenant's chain, and it shows a
-- deleted last record.
CREATE TABLE records (
    tenant_id  text        NOT NULL,
    seq        bigint      NOT NULL,
    id         text        NOT NULL,
    created_at timestamptz NOT NULL,
    actor      text        NOT NULL,
    action     text        NOT NULL,
    target     text        NOT NULL,
    details    jsonb       NOT NULL DEFAULT '{}',
    prev_hash  bytea       NOT NULL,
    hash       bytea       NOT NULL,
    PRIMARY KEY (tenant_id, seq)
);

CREATE INDEX records_by_action ON records (tenant_id, action, seq);
CREATE INDEX records_by_actor ON records (tenant_id, actor, seq);

CREATE TABLE heads (
    tenant_id text   PRIMARY KEY,
    seq       bigint NOT NULL,
    hash      bytea  NOT NULL
);
