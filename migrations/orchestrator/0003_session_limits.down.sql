ALTER TABLE runs DROP COLUMN IF EXISTS session_max_engineers, DROP COLUMN IF EXISTS session_max_tasks;
