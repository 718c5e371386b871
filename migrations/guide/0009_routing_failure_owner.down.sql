DROP INDEX IF EXISTS routing_failures_user_idx;
ALTER TABLE routing_failures DROP COLUMN IF EXISTS user_id;
