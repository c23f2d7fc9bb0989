WITH clock AS (
    SELECT coalesce(CAST(:now AS timestamptz), now()) AS now
), async_commit AS (
    SELECT set_config('synchronous_commit', 'off', true)
), prev AS (
    SELECT fingerprint, state, lease_until, status_code, response_body,
           response_headers, result_id, created_at, completed_at, expires_at
    FROM idempotency_keys
    WHERE actor_id = :actor AND operation = :operation AND idem_key = :key
), finished AS (
    INSERT INTO idempotency_keys AS k (actor_id, operation, idem_key,
        fingerprint, state, claim_token, lease_until, status_code, response_body, response_headers, result_id, created_at, completed_at, expires_at)
    SELECT :actor, :operation, :key,
        :fingerprint, 'in_progress', CAST(:token AS uuid), clock.now + CAST(:lease_us AS bigint) * interval '1 microsecond', NULL, NULL, NULL, NULL, clock.now, NULL, clock.now + CAST(:ttl_us AS bigint) * interval '1 microsecond'
    FROM clock WHERE NOT EXISTS (SELECT 1 FROM prev)
    ON CONFLICT (actor_id, operation, idem_key) DO NOTHING
    RETURNING k.result_id
)
SELECT clock.now, EXISTS (SELECT 1 FROM finished) AS claimed, 0 AS effect, prev.*
FROM clock CROSS JOIN async_commit LEFT JOIN prev ON true
