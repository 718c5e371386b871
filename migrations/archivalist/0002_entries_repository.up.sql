-- The registered repository an entry is about ("repositories/{id}"), so
-- that a plan, a task and a session briefing find the failures and
-- decisions of their own repository (spec E-09).
ALTER TABLE entries ADD COLUMN repository text NOT NULL DEFAULT '';

CREATE INDEX entries_repository_idx ON entries (tenant_id, repository, created_at DESC, id DESC)
    WHERE repository <> '';
