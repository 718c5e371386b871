-- Fewer index writes per node. Every change of a node's state or of its
-- unmet dependencies writes a new row version and an entry in each index
-- that covers it, and a node changes several times while it runs.
--
-- Only the states the scheduler looks for are indexed by state: finished
-- nodes leave the index.
DROP INDEX nodes_by_state;
CREATE INDEX nodes_by_state ON nodes (tenant_id, run_id, state)
    WHERE state IN ('PENDING', 'DISPATCHED', 'FAILED');
-- Listings by position sort one run's rows, found through the primary key.
DROP INDEX nodes_by_position;
