ALTER TABLE repositories DROP COLUMN IF EXISTS public_remote;
