-- Sessions belong to one user of one tenant; every query is scoped by both.
CREATE TABLE sessions (
    id               uuid PRIMARY KEY,
    tenant_id        text NOT NULL,
    user_id          text NOT NULL,
    display_name     text NOT NULL DEFAULT '',
    state            text NOT NULL
                     CHECK (state IN ('created', 'active', 'suspended', 'completed', 'failed')),
    metadata         jsonb NOT NULL DEFAULT '{}'::jsonb,
    summary          text NOT NULL DEFAULT '',
    failure_reason   text NOT NULL DEFAULT '',
    create_time      timestamptz NOT NULL,
    update_time      timestamptz NOT NULL,
    activate_time    timestamptz,
    suspend_time     timestamptz,
    complete_time    timestamptz,
    fail_time        timestamptz,
    last_active_time timestamptz NOT NULL
);

-- ListSessions pages a caller's sessions newest first.
CREATE INDEX sessions_owner_idx ON sessions (tenant_id, user_id, create_time DESC, id DESC);

-- Messages of a session: the user's and the Guide's own replies. A user
-- message also records how it was handled, so that a retry with the same
-- request_id returns the stored outcome instead of routing twice.
CREATE TABLE messages (
    id                uuid PRIMARY KEY,
    tenant_id         text NOT NULL,
    user_id           text NOT NULL,
    session_id        uuid NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    author            text NOT NULL,
    text              text NOT NULL,
    correlation_id    text NOT NULL,
    request_id        text,
    create_time       timestamptz NOT NULL,
    -- Outcome (user messages only).
    route_target      text NOT NULL DEFAULT '',
    route_tier        text NOT NULL DEFAULT '',
    route_confidence  double precision NOT NULL DEFAULT 0,
    route_intent_type text NOT NULL DEFAULT '',
    route_reason      text NOT NULL DEFAULT '',
    intent_subject    text NOT NULL DEFAULT '',
    reply             text NOT NULL DEFAULT '',
    reply_id          uuid,
    options           text[] NOT NULL DEFAULT '{}',
    envelope_id       uuid,
    -- Set once every event (and the envelope) of the outcome is on the bus.
    dispatch_time     timestamptz
);

CREATE UNIQUE INDEX messages_request_idx ON messages (session_id, request_id) WHERE request_id IS NOT NULL;
CREATE INDEX messages_session_idx ON messages (tenant_id, session_id, create_time, id);
