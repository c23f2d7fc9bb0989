WITH clock AS (
    SELECT coalesce(CAST(:now AS timestamptz), now()) AS now
), due AS (
    SELECT o.request_id
    FROM outbox o, clock
    WHERE o.next_attempt_at <= clock.now -- pending, by the table's CHECK
    ORDER BY o.next_attempt_at
    LIMIT CAST(:batch AS integer)
    FOR UPDATE OF o SKIP LOCKED
), taken AS (
    UPDATE outbox o SET attempts = o.attempts + 1, lease_token = CAST(:token AS uuid),
        next_attempt_at = clock.now + CAST(:lease_us AS bigint) * interval '1 microsecond',
        updated_at = clock.now
    FROM due, clock
    WHERE o.request_id = due.request_id
    RETURNING o.request_id, o.attempts
)
SELECT taken.request_id, taken.attempts, r.topic, r.note
FROM taken JOIN demo_requests r ON r.id = taken.request_id
