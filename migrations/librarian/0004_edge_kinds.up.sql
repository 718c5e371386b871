-- Code edge kinds beyond calls and imports: type relations of Go code and
-- the file -> definition edge of every language. arity ("<parameters>:<results>")
-- is kept on Go has_method edges to match method sets against interfaces.
ALTER TABLE edges ADD COLUMN arity text NOT NULL DEFAULT '';
ALTER TABLE edges DROP CONSTRAINT edges_kind_check;
ALTER TABLE edges ADD CONSTRAINT edges_kind_check CHECK (kind IN (
    'calls', 'imports', 'implements', 'embeds', 'has_field', 'has_method', 'defines', 'returns', 'receives'));
-- implements edges are recomputed from has_method edges after every index.
CREATE INDEX edges_methods ON edges (tenant_id, repository_id, kind) WHERE kind IN ('has_method', 'implements');
-- Forget the content hashes so the next full index re-reads every file and
-- stores the new edges (unchanged chunks keep their embeddings).
UPDATE files SET sha256 = ''::bytea;
