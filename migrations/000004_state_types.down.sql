ALTER TABLE outbox
    DROP CONSTRAINT outbox_pending_is_due,
    DROP CONSTRAINT outbox_submitted_has_reference,
    ALTER COLUMN state DROP DEFAULT,
    ALTER COLUMN state TYPE text,
    ALTER COLUMN state SET DEFAULT 'pending',
    ADD CONSTRAINT outbox_state_check CHECK (state IN ('pending', 'submitted', 'unknown', 'failed')),
    ADD CONSTRAINT outbox_check CHECK ((state = 'pending') = (next_attempt_at IS NOT NULL)),
    ADD CONSTRAINT outbox_check1 CHECK ((state = 'submitted') = (provider_reference IS NOT NULL));

DROP TYPE delivery_state;

ALTER TABLE idempotency_keys
    DROP CONSTRAINT idempotency_keys_lease_while_in_progress,
    DROP CONSTRAINT idempotency_keys_answer_when_completed,
    ALTER COLUMN state TYPE text,
    ADD CONSTRAINT idempotency_keys_state_check CHECK (state IN ('in_progress', 'completed')),
    ADD CONSTRAINT idempotency_keys_check CHECK ((state = 'in_progress') = (lease_until IS NOT NULL)),
    ADD CONSTRAINT idempotency_keys_check1 CHECK ((state = 'completed') = (status_code IS NOT NULL AND response_body IS NOT NULL));

DROP TYPE key_state;
