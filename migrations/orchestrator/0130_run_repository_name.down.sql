ALTER TABLE runs DROP COLUMN repository_name;
