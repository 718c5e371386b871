CREATE TABLE tenants (
    id          text PRIMARY KEY,
    name        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE users (
    tenant_id   text NOT NULL REFERENCES tenants (id),
    id          text NOT NULL,
    role        text NOT NULL CHECK (role IN ('admin', 'member', 'viewer')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id)
);

-- API keys are stored as SHA-256 hashes; the key itself is shown once.
CREATE TABLE api_keys (
    id           text PRIMARY KEY,
    tenant_id    text NOT NULL,
    user_id      text NOT NULL,
    key_hash     bytea NOT NULL UNIQUE,
    prefix       text NOT NULL,
    description  text NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now(),
    revoked_at   timestamptz,
    last_used_at timestamptz,
    FOREIGN KEY (tenant_id, user_id) REFERENCES users (tenant_id, id)
);
