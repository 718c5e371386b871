-- Reviews asked through the review API (ReviewService): each is one review
-- task dispatched to an inspector worker, and what it found. repository is
-- as the caller named it ("repositories/{id}" or a registered path),
-- repo_path the directory the workers read; review is the protobuf-encoded
-- sylk.orchestrator.v1.Review once the worker reported it.
CREATE TABLE reviews (
    tenant_id   text NOT NULL,
    id          text NOT NULL,
    user_id     text NOT NULL,
    session_id  text NOT NULL DEFAULT '',
    repository  text NOT NULL DEFAULT '',
    repo_path   text NOT NULL DEFAULT '',
    base_ref    text NOT NULL DEFAULT '',
    head_ref    text NOT NULL DEFAULT '',
    patch       text NOT NULL DEFAULT '',
    persona     text NOT NULL DEFAULT '',
    state       text NOT NULL CHECK (state IN ('PENDING', 'RUNNING', 'DONE', 'FAILED')),
    review      bytea,
    error       text NOT NULL DEFAULT '',
    create_time timestamptz NOT NULL DEFAULT now(),
    end_time    timestamptz,
    PRIMARY KEY (tenant_id, id)
);

-- ListReviews: a user's own, newest first.
CREATE INDEX reviews_by_user ON reviews (tenant_id, user_id, create_time DESC, id DESC);
