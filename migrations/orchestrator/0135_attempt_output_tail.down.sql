ALTER TABLE attempts DROP COLUMN stderr_tail;
