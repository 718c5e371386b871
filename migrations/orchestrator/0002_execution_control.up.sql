-- Execution control: pause, fail_fast, per-node retries with backoff,
-- priorities, and run leases held by orchestrator replicas.
ALTER TABLE runs DROP CONSTRAINT runs_state_check;
ALTER TABLE runs ADD CONSTRAINT runs_state_check
    CHECK (state IN ('PENDING', 'RUNNING', 'PAUSED', 'SUCCEEDED', 'FAILED', 'CANCELLED'));
ALTER TABLE runs
    ADD COLUMN fail_fast       boolean NOT NULL DEFAULT false,
    -- The replica that owns the run's scheduling until lease_expires.
    ADD COLUMN lease_owner     text NOT NULL DEFAULT '',
    ADD COLUMN lease_expires   timestamptz,
    -- Repository runs: each task works in a clone at base_commit; the
    -- nodes' patches are merged into result_patch when the run succeeds.
    ADD COLUMN repository      text NOT NULL DEFAULT '',
    ADD COLUMN base_commit     text NOT NULL DEFAULT '',
    ADD COLUMN result_patch    text NOT NULL DEFAULT '',
    ADD COLUMN merge_conflicts text[] NOT NULL DEFAULT '{}',
    -- User-interactive runs may use the reserved dispatch slots.
    ADD COLUMN interactive     boolean NOT NULL DEFAULT false;

DROP INDEX runs_active;
CREATE INDEX runs_active ON runs (create_time) WHERE state IN ('PENDING', 'RUNNING', 'PAUSED');

ALTER TABLE nodes
    ADD COLUMN priority     integer NOT NULL DEFAULT 0,
    -- Retries after the first attempt, and the first retry's delay.
    ADD COLUMN max_retries  integer NOT NULL DEFAULT 0 CHECK (max_retries >= 0),
    ADD COLUMN backoff_ms   bigint NOT NULL DEFAULT 0 CHECK (backoff_ms >= 0),
    -- A failed node waiting for its retry is PENDING with not_before set.
    ADD COLUMN not_before   timestamptz,
    ADD COLUMN paused       boolean NOT NULL DEFAULT false,
    -- Dependencies that have not succeeded yet: 0 means ready once PENDING.
    ADD COLUMN unmet_deps   integer NOT NULL DEFAULT 0,
    -- The node as submitted (protobuf-encoded sylk.orchestrator.v1.Node),
    -- so that dispatching does not decode the whole DAG.
    ADD COLUMN spec         bytea,
    ADD COLUMN patch        text NOT NULL DEFAULT '',
    -- protojson of sylk.orchestrator.v1.TaskReport and PipelineStatus.
    ADD COLUMN report       text NOT NULL DEFAULT '',
    ADD COLUMN pipeline     text NOT NULL DEFAULT '';

-- Scheduling after a success looks only at ready nodes and running ones.
CREATE INDEX nodes_ready ON nodes (tenant_id, run_id, priority DESC, layer, position)
    WHERE state = 'PENDING' AND unmet_deps = 0;
CREATE INDEX nodes_by_state ON nodes (tenant_id, run_id, state);

-- The reverse of depends_on: whom a node's success unblocks.
CREATE TABLE edges (
    tenant_id     text NOT NULL,
    run_id        text NOT NULL,
    node_id       text NOT NULL,
    dependent_id  text NOT NULL,
    PRIMARY KEY (tenant_id, run_id, node_id, dependent_id),
    FOREIGN KEY (tenant_id, run_id) REFERENCES runs (tenant_id, id) ON DELETE CASCADE
);

-- Every attempt of every node, as reported: the history behind a node's
-- current state.
CREATE TABLE attempts (
    tenant_id    text NOT NULL,
    run_id       text NOT NULL,
    node_id      text NOT NULL,
    attempt      integer NOT NULL,
    state        text NOT NULL,
    exit_code    integer NOT NULL DEFAULT 0,
    timed_out    boolean NOT NULL DEFAULT false,
    error        text NOT NULL DEFAULT '',
    worker_id    text NOT NULL DEFAULT '',
    duration_us  bigint NOT NULL DEFAULT 0,
    end_time     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, run_id, node_id, attempt),
    FOREIGN KEY (tenant_id, run_id) REFERENCES runs (tenant_id, id) ON DELETE CASCADE
);

-- The decision log (spec H-07): one markdown section per finished task
-- attempt, assembled in order when the run is read.
CREATE TABLE decision_log (
    tenant_id    text NOT NULL,
    run_id       text NOT NULL,
    seq          bigint GENERATED ALWAYS AS IDENTITY,
    node_id      text NOT NULL,
    attempt      integer NOT NULL,
    section      text NOT NULL,
    PRIMARY KEY (tenant_id, run_id, seq),
    UNIQUE (tenant_id, run_id, node_id, attempt),
    FOREIGN KEY (tenant_id, run_id) REFERENCES runs (tenant_id, id) ON DELETE CASCADE
);
