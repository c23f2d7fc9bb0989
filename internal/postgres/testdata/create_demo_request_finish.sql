WITH clock AS (
    SELECT coalesce(CAST(:now AS timestamptz), now()) AS now
), finished AS (
    UPDATE idempotency_keys SET state = 'completed', lease_until = NULL,
        status_code = CAST(:status AS integer), response_body = CAST(:body AS bytea),
        response_headers = CAST(:headers AS jsonb), result_id = :result_id,
        completed_at = clock.now
    FROM clock
    WHERE actor_id = :actor AND operation = :operation AND idem_key = :key
      AND claim_token = CAST(:token AS uuid) AND state = 'in_progress'
    RETURNING result_id
),
request AS (
    INSERT INTO demo_requests (id, actor_id, state, topic, note, created_at)
    SELECT CAST(:id AS uuid), :actor, :state, :topic, :note, CAST(:created_at AS timestamptz)
    FROM finished
    RETURNING id, created_at
), effect AS (
    INSERT INTO outbox (request_id, next_attempt_at, created_at, updated_at)
    SELECT id, created_at, created_at, created_at
    FROM request
    RETURNING request_id
)
SELECT (SELECT count(*) FROM finished) = 1 AS claimed, (SELECT count(*) FROM effect) AS effect
