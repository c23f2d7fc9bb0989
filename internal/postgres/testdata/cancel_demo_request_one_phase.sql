WITH clock AS (
    SELECT coalesce(CAST(:now AS timestamptz), now()) AS now
), prev AS (
    SELECT fingerprint, state, lease_until, status_code, response_body,
           response_headers, result_id, created_at, completed_at, expires_at
    FROM idempotency_keys
    WHERE actor_id = :actor AND operation = :operation AND idem_key = :key
), finished AS (
    INSERT INTO idempotency_keys AS k (actor_id, operation, idem_key,
        fingerprint, state, claim_token, lease_until, status_code, response_body, response_headers, result_id, created_at, completed_at, expires_at)
    SELECT :actor, :operation, :key,
        :fingerprint, 'completed', CAST(:token AS uuid), NULL, CAST(:status AS integer), CAST(:body AS bytea), CAST(:headers AS jsonb), :result_id, clock.now, clock.now, clock.now + CAST(:ttl_us AS bigint) * interval '1 microsecond'
    FROM clock WHERE NOT EXISTS (SELECT 1 FROM prev)
    ON CONFLICT (actor_id, operation, idem_key) DO NOTHING
    RETURNING k.result_id
),
effect AS (
    UPDATE demo_requests SET state = :state, cancelled_at = CAST(:cancelled_at AS timestamptz)
    FROM finished
    WHERE id = CAST(:id AS uuid) AND actor_id = :actor AND state = 'accepted'
    RETURNING id
)
SELECT clock.now, EXISTS (SELECT 1 FROM finished) AS claimed, (SELECT count(*) FROM effect) AS effect, prev.*
FROM clock LEFT JOIN prev ON true
