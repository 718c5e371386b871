-- One row per model call through the gate, with full attribution and cost
-- (spec B-17). tenant_id is '' for calls made outside any tenant.
CREATE TABLE usage_records (
    tenant_id     text          NOT NULL,
    id            uuid          NOT NULL,
    request_id    text          NOT NULL DEFAULT '',
    session_id    text          NOT NULL DEFAULT '',
    pipeline_id   text          NOT NULL DEFAULT '',
    task_id       text          NOT NULL DEFAULT '',
    agent_id      text          NOT NULL DEFAULT '',
    agent_type    text          NOT NULL DEFAULT '',
    provider      text          NOT NULL,
    model         text          NOT NULL,
    input_tokens  bigint        NOT NULL DEFAULT 0,
    output_tokens bigint        NOT NULL DEFAULT 0,
    cost_usd      numeric(18,8) NOT NULL DEFAULT 0,
    latency_ms    integer       NOT NULL DEFAULT 0,
    outcome       text          NOT NULL,
    error_tier    text          NOT NULL DEFAULT '',
    created_at    timestamptz   NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id)
);

CREATE INDEX usage_records_time_idx ON usage_records (tenant_id, created_at);
CREATE INDEX usage_records_session_idx ON usage_records (tenant_id, session_id, created_at);

-- Provider API keys stored per tenant, encrypted with AES-256-GCM under a
-- key from configuration (a Kubernetes Secret); key_id names that key so
-- it can be rotated. The plaintext is never stored, logged or returned.
CREATE TABLE provider_credentials (
    tenant_id   text        NOT NULL,
    provider    text        NOT NULL,
    ciphertext  bytea       NOT NULL,
    nonce       bytea       NOT NULL,
    key_id      text        NOT NULL,
    base_url    text        NOT NULL DEFAULT '',
    updated_by  text        NOT NULL DEFAULT '',
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, provider)
);
