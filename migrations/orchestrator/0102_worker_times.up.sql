-- When the worker received a node's dispatch and reported its result (the
-- worker's clock), to tell the Orchestrator's own scheduling time from the
-- time spent in transit and in the worker.
ALTER TABLE nodes
    ADD COLUMN worker_received_time  timestamptz,
    ADD COLUMN worker_reported_time  timestamptz;
