ALTER TABLE nodes
    DROP COLUMN handoff_patch,
    DROP COLUMN handoff,
    DROP COLUMN handoffs;
