-- A run's repository is one its tenant registered with the Librarian:
-- repository_name is its name ("repositories/{id}"), which users see;
-- repository stays the directory the services work on, resolved by the
-- Orchestrator and never taken from a request.
ALTER TABLE runs ADD COLUMN repository_name text NOT NULL DEFAULT '';
