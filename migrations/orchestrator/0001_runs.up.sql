-- A run is one execution of a DAG. The DAG itself is kept as submitted
-- (protobuf-encoded sylk.orchestrator.v1.Dag); nodes hold the execution state.
CREATE TABLE runs (
    tenant_id        text NOT NULL,
    id               text NOT NULL,
    user_id          text NOT NULL,
    session_id       text NOT NULL DEFAULT '',
    plan             text NOT NULL DEFAULT '',
    request_id       text,
    state            text NOT NULL CHECK (state IN ('PENDING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED')),
    max_concurrency  integer NOT NULL CHECK (max_concurrency >= 1),
    dag              bytea NOT NULL,
    create_time      timestamptz NOT NULL DEFAULT now(),
    start_time       timestamptz,
    end_time         timestamptz,
    PRIMARY KEY (tenant_id, id)
);

-- A retried CreateRun with the same request id finds the run it created.
CREATE UNIQUE INDEX runs_request_id ON runs (tenant_id, request_id) WHERE request_id IS NOT NULL;
-- ListRuns: newest first, optionally within one session.
CREATE INDEX runs_by_time ON runs (tenant_id, create_time DESC, id DESC);
CREATE INDEX runs_by_session ON runs (tenant_id, session_id, create_time DESC, id DESC);
-- Recovery and resync visit the unfinished runs of every tenant.
CREATE INDEX runs_active ON runs (create_time) WHERE state IN ('PENDING', 'RUNNING');

CREATE TABLE nodes (
    tenant_id         text NOT NULL,
    run_id            text NOT NULL,
    node_id           text NOT NULL,
    -- position is the node's index in the submitted DAG; layer its Kahn layer.
    position          integer NOT NULL,
    layer             integer NOT NULL,
    role              text NOT NULL,
    depends_on        text[] NOT NULL DEFAULT '{}',
    state             text NOT NULL CHECK (state IN ('PENDING', 'DISPATCHED', 'SUCCEEDED', 'FAILED', 'SKIPPED', 'CANCELLED')),
    attempt           integer NOT NULL DEFAULT 0,
    exit_code         integer NOT NULL DEFAULT 0,
    stdout            text NOT NULL DEFAULT '',
    stderr            text NOT NULL DEFAULT '',
    stdout_truncated  boolean NOT NULL DEFAULT false,
    stderr_truncated  boolean NOT NULL DEFAULT false,
    timed_out         boolean NOT NULL DEFAULT false,
    duration_us       bigint NOT NULL DEFAULT 0,
    error             text NOT NULL DEFAULT '',
    worker_id         text NOT NULL DEFAULT '',
    start_time        timestamptz,
    end_time          timestamptz,
    PRIMARY KEY (tenant_id, run_id, node_id),
    FOREIGN KEY (tenant_id, run_id) REFERENCES runs (tenant_id, id) ON DELETE CASCADE
);

CREATE INDEX nodes_by_position ON nodes (tenant_id, run_id, position);
