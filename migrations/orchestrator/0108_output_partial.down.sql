ALTER TABLE nodes DROP COLUMN output_partial;
