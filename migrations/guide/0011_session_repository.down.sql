DROP TABLE user_repositories;
ALTER TABLE sessions DROP COLUMN repository, DROP COLUMN auto_approve_trivial, DROP COLUMN allow_push,
    DROP COLUMN review_persona;
