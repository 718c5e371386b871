-- A node a user runs again (retry, ignore_inspector, ignore_tester), and
-- every node downstream of it, run even under fail_fast while another node
-- stays failed: the user asked for that work. fail_fast still cancels the
-- rest of the run's pending nodes.
ALTER TABLE nodes ADD COLUMN user_reopened boolean NOT NULL DEFAULT false;
