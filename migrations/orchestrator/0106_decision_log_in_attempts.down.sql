CREATE TABLE decision_log (
    tenant_id    text NOT NULL,
    run_id       text NOT NULL,
    seq          bigint GENERATED ALWAYS AS IDENTITY,
    node_id      text NOT NULL,
    attempt      integer NOT NULL,
    section      text NOT NULL,
    PRIMARY KEY (tenant_id, run_id, seq),
    UNIQUE (tenant_id, run_id, node_id, attempt),
    FOREIGN KEY (tenant_id, run_id) REFERENCES runs (tenant_id, id) ON DELETE CASCADE
);
INSERT INTO decision_log (tenant_id, run_id, node_id, attempt, section)
    SELECT tenant_id, run_id, node_id, attempt, section FROM attempts WHERE section <> '' ORDER BY seq;
ALTER TABLE attempts
    DROP COLUMN seq,
    DROP COLUMN section;
