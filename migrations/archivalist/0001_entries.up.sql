-- Chronicle entries: what was decided, what failed, what came out of a
-- session. Every row belongs to a tenant; session_id is NULL for entries
-- recorded outside a session.
CREATE TABLE entries (
    tenant_id          text        NOT NULL,
    id                 uuid        NOT NULL,
    category           text        NOT NULL,
    title              text        NOT NULL,
    content            text        NOT NULL DEFAULT '',
    session_id         uuid,
    user_id            text        NOT NULL DEFAULT '',
    source             text        NOT NULL DEFAULT '',
    -- The bus message an entry was stored from, so a redelivered store
    -- request does not store it twice.
    source_message_id  text,
    created_at         timestamptz NOT NULL DEFAULT now(),
    search             tsvector    GENERATED ALWAYS AS (
        setweight(to_tsvector('english'::regconfig, title), 'A') ||
        setweight(to_tsvector('english'::regconfig, content), 'B')
    ) STORED,
    PRIMARY KEY (tenant_id, id)
);

CREATE INDEX entries_search_idx ON entries USING gin (search);
CREATE INDEX entries_created_idx ON entries (tenant_id, created_at DESC, id DESC);
CREATE INDEX entries_session_idx ON entries (tenant_id, session_id, created_at DESC, id DESC);
CREATE UNIQUE INDEX entries_source_message_idx ON entries (tenant_id, source_message_id)
    WHERE source_message_id IS NOT NULL;
