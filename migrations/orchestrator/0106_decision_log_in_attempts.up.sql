-- The decision log's sections (spec H-07) live in the attempts they
-- describe: a finished attempt writes one row and one index entry instead
-- of two rows and three index entries. seq keeps the order the sections
-- were written in.
ALTER TABLE attempts
    ADD COLUMN section text NOT NULL DEFAULT '',
    ADD COLUMN seq bigint GENERATED ALWAYS AS IDENTITY;
UPDATE attempts a SET section = d.section
    FROM decision_log d
    WHERE d.tenant_id = a.tenant_id AND d.run_id = a.run_id AND d.node_id = a.node_id AND d.attempt = a.attempt;
DROP TABLE decision_log;
