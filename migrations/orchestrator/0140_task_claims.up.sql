-- A worker claims a dispatch before it runs it, and heartbeats the claim
-- while the task runs: the claim, not the bus's duplicate window, keeps an
-- attempt from running twice. Another worker takes the attempt over only
-- once the heartbeat is older than the claim timeout; a result is applied
-- only under the attempt's current claim.
CREATE TABLE task_claims (
    tenant_id     text NOT NULL,
    -- The dispatch's fence attempt id ("<run>:<node>:<attempt>", or a
    -- session check's or review's).
    attempt_id    text NOT NULL,
    run_id        text NOT NULL DEFAULT '',
    worker_id     text NOT NULL,
    token         text NOT NULL,
    claimed_at    timestamptz NOT NULL DEFAULT now(),
    heartbeat_at  timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz,
    -- Times another worker took the attempt over from a silent one.
    takeovers     integer NOT NULL DEFAULT 0,
    -- Results of a superseded claim that arrived and were ignored.
    stale_results integer NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, attempt_id)
);

CREATE INDEX task_claims_finished ON task_claims (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX task_claims_by_run ON task_claims (tenant_id, run_id);
