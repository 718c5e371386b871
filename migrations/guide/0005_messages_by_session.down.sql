DROP INDEX messages_session_time_idx;
CREATE INDEX messages_session_idx ON messages (tenant_id, session_id, create_time, id);
