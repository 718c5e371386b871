DROP INDEX usage_records_user_idx;
ALTER TABLE usage_records DROP COLUMN user_id;
