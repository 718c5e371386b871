DROP TABLE IF EXISTS replays;
DROP TABLE IF EXISTS recorded_queries;
DROP TABLE IF EXISTS recordings;
DROP TABLE IF EXISTS dead_letters;
DROP TABLE IF EXISTS routing_counts;
DROP TABLE IF EXISTS routing_failures;
DROP TABLE IF EXISTS clarifications;
DROP TABLE IF EXISTS pending_requests;
DROP TABLE IF EXISTS session_snapshots;
DROP INDEX IF EXISTS sessions_live_idx;
ALTER TABLE sessions
    DROP COLUMN IF EXISTS max_concurrent_tasks, DROP COLUMN IF EXISTS max_engineers,
    DROP COLUMN IF EXISTS task_timeout_ms, DROP COLUMN IF EXISTS session_timeout_ms,
    DROP COLUMN IF EXISTS auto_suspend_after_ms, DROP COLUMN IF EXISTS enable_git_isolation,
    DROP COLUMN IF EXISTS context, DROP COLUMN IF EXISTS context_version, DROP COLUMN IF EXISTS transitions;
