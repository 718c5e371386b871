ALTER TABLE repositories DROP COLUMN embed_model;
