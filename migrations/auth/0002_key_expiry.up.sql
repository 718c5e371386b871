-- A key may expire: authentication refuses it from expires_at on.
ALTER TABLE api_keys ADD COLUMN expires_at timestamptz;
