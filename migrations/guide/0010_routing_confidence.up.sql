-- Spec A-33: failure rate per confidence, and time to correction. Routing
-- decisions are counted per tenth of their confidence as well (-1: counted
-- before this), and a routing failure keeps the confidence and the time of
-- the decision it corrects, where they are known.
ALTER TABLE routing_counts ADD COLUMN confidence_bucket smallint NOT NULL DEFAULT -1;
ALTER TABLE routing_counts DROP CONSTRAINT routing_counts_pkey;
ALTER TABLE routing_counts ADD PRIMARY KEY (tenant_id, intent_type, confidence_bucket, shard);
ALTER TABLE routing_failures ADD COLUMN routed_confidence double precision, ADD COLUMN routed_time timestamptz;
