DROP INDEX edges_methods;
DELETE FROM edges WHERE kind NOT IN ('calls', 'imports');
ALTER TABLE edges DROP CONSTRAINT edges_kind_check;
ALTER TABLE edges ADD CONSTRAINT edges_kind_check CHECK (kind IN ('calls', 'imports'));
ALTER TABLE edges DROP COLUMN arity;
