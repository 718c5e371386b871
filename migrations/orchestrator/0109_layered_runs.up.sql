-- A run whose DAG gave its execution order runs layer by layer (spec F-02):
-- a node starts only once every node of the layers before its own ended.
ALTER TABLE runs ADD COLUMN layered boolean NOT NULL DEFAULT false;
