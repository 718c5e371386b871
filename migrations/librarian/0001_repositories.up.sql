-- Repositories registered by a tenant; every row and every query is scoped by tenant_id.
CREATE TABLE repositories (
    tenant_id     text NOT NULL,
    id            uuid NOT NULL,
    display_name  text NOT NULL DEFAULT '',
    -- Absolute path after symlink resolution, so one directory is registered once.
    path          text NOT NULL,
    index_state   text NOT NULL DEFAULT 'PENDING'
                  CHECK (index_state IN ('PENDING', 'INDEXING', 'READY', 'FAILED')),
    file_count    bigint NOT NULL DEFAULT 0,
    chunk_count   bigint NOT NULL DEFAULT 0,
    index_error   text NOT NULL DEFAULT '',
    create_time   timestamptz NOT NULL DEFAULT now(),
    -- Time of the last successful index; NULL until one succeeds.
    index_time    timestamptz,
    PRIMARY KEY (tenant_id, id),
    UNIQUE (tenant_id, path)
);

-- The files of a repository's last successful index.
CREATE TABLE files (
    tenant_id      text NOT NULL,
    repository_id  uuid NOT NULL,
    path           text NOT NULL,
    language       text NOT NULL,
    size_bytes     bigint NOT NULL,
    line_count     integer NOT NULL,
    sha256         bytea NOT NULL,
    PRIMARY KEY (tenant_id, repository_id, path),
    FOREIGN KEY (tenant_id, repository_id) REFERENCES repositories (tenant_id, id) ON DELETE CASCADE
);

-- Line windows of the indexed files. tokens holds the code-aware token text
-- computed by the service (words plus identifiers split on case, '_' and
-- digits, lower-cased); full-text search runs over it.
CREATE TABLE chunks (
    tenant_id      text NOT NULL,
    repository_id  uuid NOT NULL,
    path           text NOT NULL,
    language       text NOT NULL,
    line_start     integer NOT NULL CHECK (line_start >= 1),
    line_end       integer NOT NULL CHECK (line_end >= line_start),
    content        text NOT NULL,
    tokens         text NOT NULL,
    PRIMARY KEY (tenant_id, repository_id, path, line_start),
    FOREIGN KEY (tenant_id, repository_id, path)
        REFERENCES files (tenant_id, repository_id, path) ON DELETE CASCADE
);

CREATE INDEX chunks_tokens_fts ON chunks USING gin (to_tsvector('simple', tokens));
