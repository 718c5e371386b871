-- A remote a member registered must stay on public addresses: each pull
-- checks its host again and pins it, so that a name that later resolves
-- to an internal address reaches nothing inside.
ALTER TABLE repositories ADD COLUMN public_remote boolean NOT NULL DEFAULT false;
