-- The review desk's own storage: one row per accepted submission, keyed by
-- the sender's Idempotency-Key, so the same key is accepted once.
CREATE SEQUENCE submission_refs;

CREATE TABLE submissions (
    key         text        PRIMARY KEY,
    fingerprint text        NOT NULL,  -- hex SHA-256 of request_id, topic and note
    request_id  text        NOT NULL,
    topic       text        NOT NULL,
    note        text        NOT NULL,
    reference   text        NOT NULL UNIQUE,
    accepted_at timestamptz NOT NULL
);
