ALTER TABLE plan_versions DROP COLUMN notes, DROP COLUMN diff, DROP COLUMN feedback;
ALTER TABLE plans DROP COLUMN auto_approved, DROP COLUMN trivial, DROP COLUMN consultation, DROP COLUMN repository;
