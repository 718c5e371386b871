-- A node the user chose to go on without (/task <node> skip): SKIPPED, and
-- met for the nodes that depend on it.
ALTER TABLE nodes ADD COLUMN user_skipped boolean NOT NULL DEFAULT false;
