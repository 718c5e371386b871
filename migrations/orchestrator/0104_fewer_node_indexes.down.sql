CREATE INDEX nodes_by_position ON nodes (tenant_id, run_id, position);
DROP INDEX nodes_by_state;
CREATE INDEX nodes_by_state ON nodes (tenant_id, run_id, state);
