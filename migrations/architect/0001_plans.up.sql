-- A plan belongs to one user of one tenant and to one of their sessions.
-- Its content (request, title, DAG) lives in versioned rows of
-- plan_versions; plans.version points at the current one.
CREATE TABLE plans (
    id                uuid PRIMARY KEY,
    tenant_id         text NOT NULL,
    user_id           text NOT NULL,
    session_id        uuid NOT NULL,
    state             text NOT NULL CHECK (state IN ('awaiting_approval', 'approved', 'rejected')),
    version           integer NOT NULL DEFAULT 1 CHECK (version >= 1),
    run               text NOT NULL DEFAULT '',
    reject_reason     text NOT NULL DEFAULT '',
    -- The inbox envelope a plan was drafted from; a redelivered envelope
    -- finds its plan instead of drafting another.
    source_message_id text,
    correlation_id    text NOT NULL DEFAULT '',
    create_time       timestamptz NOT NULL,
    update_time       timestamptz NOT NULL,
    approve_time      timestamptz,
    reject_time       timestamptz
);

CREATE UNIQUE INDEX plans_source_message_idx ON plans (tenant_id, source_message_id)
    WHERE source_message_id IS NOT NULL;
-- ListPlans pages a session's plans newest first.
CREATE INDEX plans_session_idx ON plans (tenant_id, user_id, session_id, create_time DESC, id DESC);

CREATE TABLE plan_versions (
    plan_id     uuid NOT NULL REFERENCES plans (id) ON DELETE CASCADE,
    tenant_id   text NOT NULL,
    version     integer NOT NULL CHECK (version >= 1),
    request     text NOT NULL,
    title       text NOT NULL,
    planner     text NOT NULL,
    -- The DAG as protobuf JSON (sylk.orchestrator.v1.Dag).
    dag         jsonb NOT NULL,
    create_time timestamptz NOT NULL,
    PRIMARY KEY (plan_id, version)
);
