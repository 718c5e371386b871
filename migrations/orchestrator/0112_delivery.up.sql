-- Delivery of a run's combined change as a branch sylk/<run> (spec F-29..F-33):
-- whether the run asked for it (deliver) and may push it to a URL
-- repository's remote (allow_push), and how it was delivered (a protojson
-- sylk.orchestrator.v1.Delivery; '' until it was).
ALTER TABLE runs ADD COLUMN deliver boolean NOT NULL DEFAULT false,
    ADD COLUMN allow_push boolean NOT NULL DEFAULT false,
    ADD COLUMN delivery text NOT NULL DEFAULT '';

-- The git bundle of a delivered run's branch, offered for download
-- (GetRunBundle); bounded by -orchestrator.max-bundle-bytes.
CREATE TABLE run_bundles (
    tenant_id text NOT NULL,
    run_id    text NOT NULL,
    bundle    bytea NOT NULL,
    PRIMARY KEY (tenant_id, run_id),
    FOREIGN KEY (tenant_id, run_id) REFERENCES runs (tenant_id, id) ON DELETE CASCADE
);

-- The runs awaiting their delivery, which every replica's sweep visits.
CREATE INDEX runs_awaiting_delivery ON runs (end_time) WHERE deliver AND delivery = '';
