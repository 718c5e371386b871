-- Session limits (spec A-14), the private context with an optimistic
-- version, and the history of lifecycle transitions.
ALTER TABLE sessions
    ADD COLUMN max_concurrent_tasks  integer NOT NULL DEFAULT 0,
    ADD COLUMN max_engineers         integer NOT NULL DEFAULT 0,
    ADD COLUMN task_timeout_ms       bigint  NOT NULL DEFAULT 0,
    ADD COLUMN session_timeout_ms    bigint  NOT NULL DEFAULT 0,
    ADD COLUMN auto_suspend_after_ms bigint  NOT NULL DEFAULT 0,
    ADD COLUMN enable_git_isolation  boolean NOT NULL DEFAULT false,
    ADD COLUMN context               jsonb   NOT NULL DEFAULT '{}'::jsonb,
    ADD COLUMN context_version       bigint  NOT NULL DEFAULT 0,
    ADD COLUMN transitions           jsonb   NOT NULL DEFAULT '[]'::jsonb;

-- The reaper scans active and suspended sessions.
CREATE INDEX sessions_live_idx ON sessions (state, last_active_time) WHERE state IN ('active', 'suspended', 'created');

-- Snapshots taken on suspend (spec A-17), stored as protobuf JSON.
CREATE TABLE session_snapshots (
    id           uuid PRIMARY KEY,
    tenant_id    text NOT NULL,
    user_id      text NOT NULL,
    session_id   uuid NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    snapshot     jsonb NOT NULL,
    create_time  timestamptz NOT NULL,
    restore_time timestamptz
);
CREATE INDEX session_snapshots_session_idx ON session_snapshots (tenant_id, session_id, create_time DESC);

-- Routed requests waiting for a response (correlation), with a deadline.
CREATE TABLE pending_requests (
    correlation_id  text PRIMARY KEY,
    tenant_id       text NOT NULL,
    user_id         text NOT NULL,
    session_id      uuid NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    message_id      uuid,
    target          text NOT NULL,
    intent_type     text NOT NULL DEFAULT '',
    original        text NOT NULL DEFAULT '',
    -- Where the answer is cached (knowledge queries with confidence > 0.8).
    cache_key       text NOT NULL DEFAULT '',
    cache_ttl_ms    bigint NOT NULL DEFAULT 0,
    envelope        bytea NOT NULL,
    deadline        timestamptz NOT NULL,
    clarifications  integer NOT NULL DEFAULT 0,
    create_time     timestamptz NOT NULL,
    -- pending, answered, timed_out, escalated
    state           text NOT NULL DEFAULT 'pending'
);
CREATE INDEX pending_requests_deadline_idx ON pending_requests (deadline) WHERE state = 'pending';
CREATE INDEX pending_requests_session_idx ON pending_requests (tenant_id, session_id) WHERE state = 'pending';

-- Questions waiting for the user's answer; the answer goes to requesting_agent.
CREATE TABLE clarifications (
    id               uuid PRIMARY KEY,
    tenant_id        text NOT NULL,
    user_id          text NOT NULL,
    session_id       uuid NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    correlation_id   text NOT NULL,
    requesting_agent text NOT NULL,
    question         text NOT NULL,
    options          text[] NOT NULL DEFAULT '{}',
    context          text NOT NULL DEFAULT '',
    -- The request it is about (the user's text), for routing questions.
    original         text NOT NULL DEFAULT '',
    create_time      timestamptz NOT NULL,
    answer           text,
    answer_time      timestamptz
);
CREATE INDEX clarifications_pending_idx ON clarifications (tenant_id, session_id, create_time) WHERE answer_time IS NULL;

-- Routing failures (spec A-33); each is also sent to the Archivalist.
CREATE TABLE routing_failures (
    id               text PRIMARY KEY,
    tenant_id        text NOT NULL,
    session_id       text NOT NULL DEFAULT '',
    original_request text NOT NULL,
    pattern          text NOT NULL,
    classified_as    text NOT NULL DEFAULT '',
    routed_to        text NOT NULL,
    should_have_been text NOT NULL,
    failure_signal   text NOT NULL,
    create_time      timestamptz NOT NULL
);
CREATE INDEX routing_failures_tenant_idx ON routing_failures (tenant_id, create_time DESC);

-- Routing decisions counted per intent type, for accuracy.
CREATE TABLE routing_counts (
    tenant_id   text NOT NULL,
    intent_type text NOT NULL,
    routed      bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, intent_type)
);

-- Messages that could not be delivered, replayable.
CREATE TABLE dead_letters (
    id               uuid PRIMARY KEY,
    tenant_id        text NOT NULL,
    session_id       text NOT NULL DEFAULT '',
    target           text NOT NULL,
    correlation_id   text NOT NULL DEFAULT '',
    reason           text NOT NULL,
    message_type     text NOT NULL DEFAULT '',
    envelope         bytea NOT NULL,
    create_time      timestamptz NOT NULL,
    replay_count     integer NOT NULL DEFAULT 0,
    last_replay_time timestamptz
);
CREATE INDEX dead_letters_tenant_idx ON dead_letters (tenant_id, create_time DESC);

-- Recordings of a session's queries (spec E-07).
CREATE TABLE recordings (
    id           text PRIMARY KEY,
    tenant_id    text NOT NULL,
    user_id      text NOT NULL,
    session_id   uuid NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    display_name text NOT NULL DEFAULT '',
    description  text NOT NULL DEFAULT '',
    tags         text[] NOT NULL DEFAULT '{}',
    create_time  timestamptz NOT NULL,
    stop_time    timestamptz
);
CREATE INDEX recordings_session_idx ON recordings (tenant_id, session_id, create_time);

CREATE TABLE recorded_queries (
    recording_id      text NOT NULL REFERENCES recordings (id) ON DELETE CASCADE,
    idx               integer NOT NULL,
    time              timestamptz NOT NULL,
    raw_query         text NOT NULL,
    classified_intent text NOT NULL DEFAULT '',
    routed_to         text NOT NULL DEFAULT '',
    response          text NOT NULL DEFAULT '',
    success           boolean NOT NULL DEFAULT true,
    correlation_id    text NOT NULL DEFAULT '',
    PRIMARY KEY (recording_id, idx)
);

CREATE TABLE replays (
    id            uuid PRIMARY KEY,
    tenant_id     text NOT NULL,
    user_id       text NOT NULL,
    session_id    uuid NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    recording_id  text NOT NULL REFERENCES recordings (id) ON DELETE CASCADE,
    mode          text NOT NULL,
    current_index integer NOT NULL DEFAULT 0,
    skipped       integer[] NOT NULL DEFAULT '{}',
    modifications jsonb NOT NULL DEFAULT '{}'::jsonb,
    done          boolean NOT NULL DEFAULT false,
    start_time    timestamptz NOT NULL
);
