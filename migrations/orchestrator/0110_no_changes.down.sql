-- Before NO_CHANGES, a node that changed nothing succeeded, and so did its run.
UPDATE nodes SET state = 'SUCCEEDED' WHERE state = 'NO_CHANGES';
UPDATE runs SET state = 'SUCCEEDED' WHERE state = 'NO_CHANGES';
ALTER TABLE nodes DROP CONSTRAINT nodes_state_check;
ALTER TABLE nodes ADD CONSTRAINT nodes_state_check
    CHECK (state IN ('PENDING', 'DISPATCHED', 'SUCCEEDED', 'FAILED', 'SKIPPED', 'CANCELLED'));
ALTER TABLE runs DROP CONSTRAINT runs_state_check;
ALTER TABLE runs ADD CONSTRAINT runs_state_check
    CHECK (state IN ('PENDING', 'RUNNING', 'PAUSED', 'SUCCEEDED', 'FAILED', 'CANCELLED'));
