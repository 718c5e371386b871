-- NO_CHANGES: a node whose agent was asked to change the code and changed
-- nothing (its error says why; its dependents run as after a success), and
-- a run whose nodes all ended, none failed, and none changed the code.
ALTER TABLE runs DROP CONSTRAINT runs_state_check;
ALTER TABLE runs ADD CONSTRAINT runs_state_check
    CHECK (state IN ('PENDING', 'RUNNING', 'PAUSED', 'SUCCEEDED', 'FAILED', 'CANCELLED', 'NO_CHANGES'));
ALTER TABLE nodes DROP CONSTRAINT nodes_state_check;
ALTER TABLE nodes ADD CONSTRAINT nodes_state_check
    CHECK (state IN ('PENDING', 'DISPATCHED', 'SUCCEEDED', 'FAILED', 'SKIPPED', 'CANCELLED', 'NO_CHANGES'));
