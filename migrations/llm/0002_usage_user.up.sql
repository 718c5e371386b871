-- The user a model call was made for, so that a member's usage report holds
-- only their own calls. Records made before are '' (no user).
ALTER TABLE usage_records ADD COLUMN user_id text NOT NULL DEFAULT '';
CREATE INDEX usage_records_user_idx ON usage_records (tenant_id, user_id, created_at);
