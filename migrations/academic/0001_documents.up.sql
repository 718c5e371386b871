-- Ingested documents and their sections. A document is split at ingestion
-- (markdown by headings, text by paragraphs); search runs over sections.
CREATE TABLE documents (
    tenant_id       text        NOT NULL,
    id              uuid        NOT NULL,
    title           text        NOT NULL,
    source          text        NOT NULL DEFAULT '',
    format          text        NOT NULL CHECK (format IN ('markdown', 'text')),
    content         text        NOT NULL,
    content_sha256  text        NOT NULL,
    section_count   integer     NOT NULL,
    user_id         text        NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id)
);

CREATE INDEX documents_created_idx ON documents (tenant_id, created_at DESC, id DESC);

CREATE TABLE sections (
    tenant_id    text     NOT NULL,
    document_id  uuid     NOT NULL,
    ordinal      integer  NOT NULL,
    -- The heading path, for example 'Install > Linux'; empty for text.
    heading      text     NOT NULL DEFAULT '',
    body         text     NOT NULL,
    line_start   integer  NOT NULL,
    line_end     integer  NOT NULL,
    -- Only the first 256 KiB of a body is indexed, which keeps every
    -- vector well below the text-search size limit.
    search       tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector('english'::regconfig, heading), 'A') ||
        setweight(to_tsvector('english'::regconfig, left(body, 262144)), 'B')
    ) STORED,
    PRIMARY KEY (tenant_id, document_id, ordinal),
    FOREIGN KEY (tenant_id, document_id) REFERENCES documents (tenant_id, id) ON DELETE CASCADE,
    CHECK (line_start >= 1 AND line_end >= line_start)
);

CREATE INDEX sections_search_idx ON sections USING gin (search);
