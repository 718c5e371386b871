ALTER TABLE routing_failures DROP COLUMN routed_confidence, DROP COLUMN routed_time;
CREATE TABLE routing_counts_merged AS
    SELECT tenant_id, intent_type, shard, sum(routed)::bigint AS routed FROM routing_counts GROUP BY tenant_id, intent_type, shard;
DROP TABLE routing_counts;
ALTER TABLE routing_counts_merged RENAME TO routing_counts;
ALTER TABLE routing_counts ALTER COLUMN routed SET NOT NULL, ALTER COLUMN routed SET DEFAULT 0,
    ALTER COLUMN shard SET NOT NULL, ALTER COLUMN shard SET DEFAULT 0;
ALTER TABLE routing_counts ADD PRIMARY KEY (tenant_id, intent_type, shard);
