DROP INDEX IF EXISTS entries_repository_idx;
ALTER TABLE entries DROP COLUMN IF EXISTS repository;
