-- Back to one outbox row per request, and four delivery states: the desk's
-- cancels still to send are dropped, and a withdrawn delivery reads as
-- failed (it never reached the desk). An enum value cannot be removed, so
-- the type is made again.
DELETE FROM outbox WHERE kind = 'cancel';

ALTER TABLE outbox
    DROP CONSTRAINT outbox_pkey,
    DROP COLUMN kind,
    ADD PRIMARY KEY (request_id);

DROP TYPE outbox_kind;

UPDATE outbox SET state = 'failed', last_error = 'withdrawn by its cancel' WHERE state = 'withdrawn';

ALTER TABLE outbox
    DROP CONSTRAINT outbox_pending_is_due,
    DROP CONSTRAINT outbox_submitted_has_reference,
    ALTER COLUMN state DROP DEFAULT,
    ALTER COLUMN state TYPE text;

DROP TYPE delivery_state;

CREATE TYPE delivery_state AS ENUM ('pending', 'submitted', 'unknown', 'failed');

ALTER TABLE outbox
    ALTER COLUMN state TYPE delivery_state USING state::delivery_state,
    ALTER COLUMN state SET DEFAULT 'pending',
    ADD CONSTRAINT outbox_pending_is_due CHECK ((state = 'pending') = (next_attempt_at IS NOT NULL)),
    ADD CONSTRAINT outbox_submitted_has_reference CHECK ((state = 'submitted') = (provider_reference IS NOT NULL));
