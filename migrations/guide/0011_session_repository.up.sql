-- A session works on a registered repository ("repositories/{id}", '' for
-- none), and its configuration says whether a trivial request's plan is
-- approved without asking, whether a delivered branch may be pushed and
-- which review persona its runs use.
ALTER TABLE sessions
    ADD COLUMN repository           text    NOT NULL DEFAULT '',
    ADD COLUMN auto_approve_trivial boolean NOT NULL DEFAULT false,
    ADD COLUMN allow_push           boolean NOT NULL DEFAULT false,
    ADD COLUMN review_persona       text    NOT NULL DEFAULT '';

-- The repository each user last set on one of their sessions: a new
-- session that names none takes it.
CREATE TABLE user_repositories (
    tenant_id   text        NOT NULL,
    user_id     text        NOT NULL,
    repository  text        NOT NULL,
    update_time timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, user_id)
);
