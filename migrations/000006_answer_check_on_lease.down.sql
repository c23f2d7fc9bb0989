ALTER TABLE idempotency_keys
    DROP CONSTRAINT idempotency_keys_answer_when_completed,
    ADD CONSTRAINT idempotency_keys_answer_when_completed
        CHECK ((state = 'completed') = (status_code IS NOT NULL AND response_body IS NOT NULL));
