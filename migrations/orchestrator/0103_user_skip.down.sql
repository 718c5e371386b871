ALTER TABLE nodes DROP COLUMN user_skipped;
