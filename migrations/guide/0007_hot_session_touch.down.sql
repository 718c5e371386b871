ALTER TABLE sessions RESET (fillfactor);
DROP INDEX sessions_live_idx;
CREATE INDEX sessions_live_idx ON sessions (state, last_active_time) WHERE state IN ('active', 'suspended', 'created');
