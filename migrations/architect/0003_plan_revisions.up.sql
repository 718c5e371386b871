-- A plan works on its session's repository ("repositories/{id}", '' for
-- none) and keeps what the Librarian and the Archivalist said before it was
-- drafted (spec E-11), as protobuf JSON (sylk.architect.v1.PlanConsultation);
-- NULL for plans drafted before. A trivial request's plan is one task, and
-- may have been approved without asking.
ALTER TABLE plans
    ADD COLUMN repository    text NOT NULL DEFAULT '',
    ADD COLUMN consultation  jsonb,
    ADD COLUMN trivial       boolean NOT NULL DEFAULT false,
    ADD COLUMN auto_approved boolean NOT NULL DEFAULT false;

-- Each version after the first answers the user's feedback and says, in
-- words, what changed from the version before; notes are what the user
-- should know before approving it.
ALTER TABLE plan_versions
    ADD COLUMN feedback text NOT NULL DEFAULT '',
    ADD COLUMN diff     text NOT NULL DEFAULT '',
    ADD COLUMN notes    text[] NOT NULL DEFAULT '{}';
