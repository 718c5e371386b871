-- Session task limits (the session's SessionConfig, passed with the run):
-- nodes of the session running at once, and engineers among them, across
-- all its unfinished runs. 0 means no such limit.
ALTER TABLE runs
    ADD COLUMN session_max_tasks      integer NOT NULL DEFAULT 0 CHECK (session_max_tasks >= 0),
    ADD COLUMN session_max_engineers  integer NOT NULL DEFAULT 0 CHECK (session_max_engineers >= 0);
