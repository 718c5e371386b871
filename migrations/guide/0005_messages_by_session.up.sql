-- Every message query names the session (a uuid, unique across tenants), and
-- each also checks tenant and user on the rows it finds. An index led by
-- tenant_id let the planner, on a fast-growing table whose statistics lag,
-- combine a whole-tenant index range with the primary key to find a few
-- messages by id (the dispatch markers), which cost a scan of every message
-- of the tenant per batch. Leading with the session avoids that and makes
-- the index smaller.
DROP INDEX messages_session_idx;
CREATE INDEX messages_session_time_idx ON messages (session_id, create_time, id);
