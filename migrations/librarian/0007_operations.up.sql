-- Index operations: a repository's (re)index runs in the background of the
-- librarian that accepted the request, which records its progress here so
-- that any replica can answer GetOperation. No foreign key to repositories:
-- a failed first index removes its repository, and the operation must
-- still say why.
CREATE TABLE operations (
    tenant_id        text NOT NULL,
    id               uuid NOT NULL,
    repository_id    uuid NOT NULL,
    -- 'create' (the first index of a repository registered with it) or 'index'.
    kind             text NOT NULL CHECK (kind IN ('create', 'index')),
    full_index       boolean NOT NULL DEFAULT false,
    phase            text NOT NULL DEFAULT 'SCANNING',
    files_total      bigint NOT NULL DEFAULT 0,
    files_done       bigint NOT NULL DEFAULT 0,
    chunks_total     bigint NOT NULL DEFAULT 0,
    chunks_done      bigint NOT NULL DEFAULT 0,
    lexical_ready    boolean NOT NULL DEFAULT false,
    semantic_ready   boolean NOT NULL DEFAULT false,
    file_errors      bigint NOT NULL DEFAULT 0,
    error_samples    text[] NOT NULL DEFAULT '{}',
    cancel_requested boolean NOT NULL DEFAULT false,
    done             boolean NOT NULL DEFAULT false,
    -- A google.rpc.Code and message once failed or cancelled; 0 otherwise.
    error_code       integer NOT NULL DEFAULT 0,
    error_message    text NOT NULL DEFAULT '',
    start_time       timestamptz NOT NULL DEFAULT now(),
    -- The runner's heartbeat: an operation not done whose update_time is
    -- old lost its process, and is marked failed.
    update_time      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id)
);

CREATE INDEX operations_repository ON operations (tenant_id, repository_id, start_time DESC);
CREATE INDEX operations_tenant ON operations (tenant_id, start_time DESC, id);
CREATE INDEX operations_running ON operations (update_time) WHERE NOT done;
-- One running operation per repository.
CREATE UNIQUE INDEX operations_one_running ON operations (tenant_id, repository_id) WHERE NOT done;
