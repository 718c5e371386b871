ALTER TABLE plan_versions DROP COLUMN intent;
