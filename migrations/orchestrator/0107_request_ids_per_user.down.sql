-- Fails if two users of a tenant used the same request id since the up.
ALTER TABLE runs DROP COLUMN request_hash;
DROP INDEX runs_request_id;
CREATE UNIQUE INDEX runs_request_id ON runs (tenant_id, request_id) WHERE request_id IS NOT NULL;
