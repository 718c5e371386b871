DROP TABLE edges;
DROP TABLE symbols;
DROP TABLE chunks;
ALTER TABLE repositories DROP COLUMN url, DROP COLUMN last_commit, DROP COLUMN generation;
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
