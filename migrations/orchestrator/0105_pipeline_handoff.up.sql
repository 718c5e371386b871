-- Pipeline handoffs (spec F-23): a pipeline whose Engineer reached its
-- context threshold hands its state to a fresh pipeline of the same node.
-- handoffs counts them (they do not use up the node's retries); handoff is
-- the last handed state (protojson sylk.orchestrator.v1.PipelineHandoff)
-- and handoff_patch the files the new pipeline starts from.
ALTER TABLE nodes
    ADD COLUMN handoffs integer NOT NULL DEFAULT 0,
    ADD COLUMN handoff text,
    ADD COLUMN handoff_patch text;
