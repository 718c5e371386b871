-- Document frequency of each search token per repository, refreshed by full
-- index passes; searches use it to pick a query's rarest terms.
CREATE TABLE terms (
    tenant_id      text NOT NULL,
    repository_id  uuid NOT NULL,
    term           text NOT NULL,
    df             integer NOT NULL,
    PRIMARY KEY (tenant_id, repository_id, term),
    FOREIGN KEY (tenant_id, repository_id) REFERENCES repositories (tenant_id, id) ON DELETE CASCADE
);
