-- Failure memory records every failed attempt of a node, also one that a
-- later attempt recovered from (spec G-25): the end of a failed attempt's
-- output is kept with it, since the node keeps only its last attempt's.
ALTER TABLE attempts ADD COLUMN stderr_tail text NOT NULL DEFAULT '';
