-- The intent a plan version serves, enriched with its feature domain's
-- expectations (spec A-10, A-11), as protobuf JSON
-- (sylk.architect.v1.PlanIntent); NULL for versions drafted before.
ALTER TABLE plan_versions ADD COLUMN intent jsonb;
