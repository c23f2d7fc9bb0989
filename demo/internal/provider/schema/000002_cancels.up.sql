-- The review desk's cancels: one row per accepted cancel, keyed by the
-- sender's Idempotency-Key for the cancel, and at most one per submission.
-- A cancel may come before its submission (the sender's two calls need no
-- order): the desk keeps it, and the submission, when it comes, is
-- cancelled from the start.
CREATE SEQUENCE cancel_refs;

CREATE TABLE cancels (
    key            text        PRIMARY KEY,
    submission_key text        NOT NULL UNIQUE, -- submissions.key, which may not exist yet
    reference      text        NOT NULL UNIQUE,
    accepted_at    timestamptz NOT NULL
);
