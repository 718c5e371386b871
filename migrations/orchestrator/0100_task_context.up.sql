-- Selective task context (spec H-01..H-05) and session-level checks over a
-- run's merged result (spec F-06).
ALTER TABLE runs
    -- protobuf-encoded sylk.orchestrator.v1.RunContext, or NULL.
    ADD COLUMN context         bytea,
    ADD COLUMN session_checks  boolean NOT NULL DEFAULT false,
    -- protojson of sylk.orchestrator.v1.SessionCheck; '' before it starts.
    ADD COLUMN session_check   text NOT NULL DEFAULT '',
    -- How many times a user action ran a node of the ended run again.
    ADD COLUMN reopened        integer NOT NULL DEFAULT 0;
