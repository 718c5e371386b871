-- A request id makes CreateRun idempotent for the user who sent it: another
-- user of the tenant reusing the id gets a run of their own. request_hash
-- is a digest of the request, so that the id reused for a different
-- request is refused instead of answered with the first run (NULL for runs
-- created before this column, whose retries are not compared).
DROP INDEX runs_request_id;
CREATE UNIQUE INDEX runs_request_id ON runs (tenant_id, user_id, request_id) WHERE request_id IS NOT NULL;
ALTER TABLE runs ADD COLUMN request_hash bytea;
