-- Routing counts are spread over shards so that concurrent messages of one
-- intent type do not queue on one row lock until their commits; readers sum
-- the shards.
ALTER TABLE routing_counts ADD COLUMN shard smallint NOT NULL DEFAULT 0;
ALTER TABLE routing_counts DROP CONSTRAINT routing_counts_pkey;
ALTER TABLE routing_counts ADD PRIMARY KEY (tenant_id, intent_type, shard);
