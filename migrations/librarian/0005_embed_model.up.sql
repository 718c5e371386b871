-- The embedding model of a repository's last successful index. An index with
-- another model re-embeds every file whose chunks were embedded by an older
-- one, unchanged files included: search reads the current model's vectors
-- only. Empty for repositories indexed before this column existed, which
-- the next index checks chunk by chunk.
ALTER TABLE repositories ADD COLUMN embed_model text NOT NULL DEFAULT '';
