WITH clock AS (
    SELECT coalesce(CAST(:now AS timestamptz), now()) AS now
), async_commit AS (
    SELECT set_config('synchronous_commit', 'off', true)
), prev AS (
    SELECT fingerprint, state, lease_until, status_code, response_body,
           response_headers, result_id, created_at, completed_at, expires_at
    FROM idempotency_keys
    WHERE actor_id = :actor AND operation = :operation AND idem_key = :key
), fresh AS (
    INSERT INTO idempotency_keys AS k (actor_id, operation, idem_key,
        fingerprint, state, claim_token, lease_until, status_code, response_body, response_headers, result_id, created_at, completed_at, expires_at)
    SELECT :actor, :operation, :key,
        :fingerprint, 'in_progress', CAST(:token AS uuid), clock.now + CAST(:lease_us AS bigint) * interval '1 microsecond', NULL, NULL, NULL, NULL, clock.now, NULL, clock.now + CAST(:ttl_us AS bigint) * interval '1 microsecond'
    FROM clock WHERE NOT EXISTS (SELECT 1 FROM prev)
    ON CONFLICT (actor_id, operation, idem_key) DO NOTHING
    RETURNING k.result_id
), takeover AS (
    UPDATE idempotency_keys k SET
        fingerprint = :fingerprint,
        state = 'in_progress',
        claim_token = CAST(:token AS uuid),
        lease_until = clock.now + CAST(:lease_us AS bigint) * interval '1 microsecond',
        status_code = NULL,
        response_body = NULL,
        response_headers = NULL,
        result_id = NULL,
        created_at = clock.now,
        completed_at = NULL,
        expires_at = clock.now + CAST(:ttl_us AS bigint) * interval '1 microsecond'
    FROM clock
    WHERE k.actor_id = :actor AND k.operation = :operation AND k.idem_key = :key
      AND ((k.expires_at <= clock.now AND (k.state = 'completed' OR k.lease_until <= clock.now))
        OR (k.state = 'in_progress' AND k.lease_until <= clock.now AND k.fingerprint = :fingerprint))
    RETURNING k.result_id
), finished AS (
    SELECT result_id FROM fresh UNION ALL SELECT result_id FROM takeover
)
SELECT clock.now, EXISTS (SELECT 1 FROM finished) AS claimed, 0 AS effect, prev.*
FROM clock CROSS JOIN async_commit LEFT JOIN prev ON true
