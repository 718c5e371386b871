-- Syntax-aware index: chunks follow declarations and carry stable ids,
-- symbols, embeddings; symbols and edges describe Go code. The line-window
-- chunks of 0001 are dropped: repositories are re-indexed to fill the new
-- tables.
DROP TABLE chunks;

ALTER TABLE repositories
    ADD COLUMN url text NOT NULL DEFAULT '',
    ADD COLUMN last_commit text NOT NULL DEFAULT '',
    -- Bumped by every index that changed anything; caches key on it.
    ADD COLUMN generation bigint NOT NULL DEFAULT 0;

UPDATE repositories SET file_count = 0, chunk_count = 0, index_time = NULL, index_state = 'PENDING';
DELETE FROM files;

CREATE TABLE chunks (
    tenant_id      text NOT NULL,
    repository_id  uuid NOT NULL,
    -- Stable across re-indexing: derived from path, kind, symbol and ordinal.
    id             text NOT NULL,
    path           text NOT NULL,
    language       text NOT NULL,
    line_start     integer NOT NULL CHECK (line_start >= 1),
    line_end       integer NOT NULL CHECK (line_end >= line_start),
    symbol         text NOT NULL DEFAULT '',
    kind           text NOT NULL DEFAULT '',
    -- Identifiers the chunk defines, space-separated, as written.
    names          text NOT NULL DEFAULT '',
    content        text NOT NULL,
    tokens         text NOT NULL,
    content_hash   bytea NOT NULL,
    -- Little-endian float32 unit vector from the model named in model.
    embedding      bytea NOT NULL,
    model          text NOT NULL,
    -- Tokens of the file and directory names, ranked below content matches.
    path_tokens    text NOT NULL DEFAULT '',
    tsv            tsvector GENERATED ALWAYS AS (
                       setweight(to_tsvector('simple', tokens), 'A') ||
                       setweight(to_tsvector('simple', path_tokens), 'D')) STORED,
    PRIMARY KEY (tenant_id, repository_id, id),
    FOREIGN KEY (tenant_id, repository_id, path)
        REFERENCES files (tenant_id, repository_id, path) ON DELETE CASCADE
);

CREATE INDEX chunks_tsv ON chunks USING gin (tsv);
CREATE INDEX chunks_file ON chunks (tenant_id, repository_id, path);
CREATE INDEX chunks_names ON chunks USING gin (string_to_array(names, ' '));

CREATE TABLE symbols (
    tenant_id      text NOT NULL,
    repository_id  uuid NOT NULL,
    -- Qualified name: "<package path>.<Name>" or "<package path>.<Recv>.<Name>".
    id             text NOT NULL,
    name           text NOT NULL,
    kind           text NOT NULL,
    path           text NOT NULL,
    package        text NOT NULL,
    signature      text NOT NULL,
    doc            text NOT NULL,
    line_start     integer NOT NULL,
    line_end       integer NOT NULL,
    FOREIGN KEY (tenant_id, repository_id, path)
        REFERENCES files (tenant_id, repository_id, path) ON DELETE CASCADE
);

CREATE INDEX symbols_id ON symbols (tenant_id, repository_id, id);
CREATE INDEX symbols_file ON symbols (tenant_id, repository_id, path);

CREATE TABLE edges (
    tenant_id      text NOT NULL,
    repository_id  uuid NOT NULL,
    path           text NOT NULL,
    source         text NOT NULL,
    target         text NOT NULL,
    kind           text NOT NULL CHECK (kind IN ('calls', 'imports')),
    line           integer NOT NULL,
    FOREIGN KEY (tenant_id, repository_id, path)
        REFERENCES files (tenant_id, repository_id, path) ON DELETE CASCADE
);

CREATE INDEX edges_source ON edges (tenant_id, repository_id, source);
CREATE INDEX edges_target ON edges (tenant_id, repository_id, target);
CREATE INDEX edges_file ON edges (tenant_id, repository_id, path);
