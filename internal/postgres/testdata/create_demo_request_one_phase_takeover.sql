WITH clock AS (
    SELECT coalesce(CAST(:now AS timestamptz), now()) AS now
), prev AS (
    SELECT fingerprint, state, lease_until, status_code, response_body,
           response_headers, result_id, created_at, completed_at, expires_at
    FROM idempotency_keys
    WHERE actor_id = :actor AND operation = :operation AND idem_key = :key
), fresh AS (
    INSERT INTO idempotency_keys AS k (actor_id, operation, idem_key,
        fingerprint, state, claim_token, lease_until, status_code, response_body, response_headers, result_id, created_at, completed_at, expires_at)
    SELECT :actor, :operation, :key,
        :fingerprint, 'completed', CAST(:token AS uuid), NULL, CAST(:status AS integer), CAST(:body AS bytea), CAST(:headers AS jsonb), :result_id, clock.now, clock.now, clock.now + CAST(:ttl_us AS bigint) * interval '1 microsecond'
    FROM clock WHERE NOT EXISTS (SELECT 1 FROM prev)
    ON CONFLICT (actor_id, operation, idem_key) DO NOTHING
    RETURNING k.result_id
), takeover AS (
    UPDATE idempotency_keys k SET
        fingerprint = :fingerprint,
        state = 'completed',
        claim_token = CAST(:token AS uuid),
        lease_until = NULL,
        status_code = CAST(:status AS integer),
        response_body = CAST(:body AS bytea),
        response_headers = CAST(:headers AS jsonb),
        result_id = :result_id,
        created_at = clock.now,
        completed_at = clock.now,
        expires_at = clock.now + CAST(:ttl_us AS bigint) * interval '1 microsecond'
    FROM clock
    WHERE k.actor_id = :actor AND k.operation = :operation AND k.idem_key = :key
      AND ((k.expires_at <= clock.now AND (k.state = 'completed' OR k.lease_until <= clock.now))
        OR (k.state = 'in_progress' AND k.lease_until <= clock.now AND k.fingerprint = :fingerprint))
    RETURNING k.result_id
), finished AS (
    SELECT result_id FROM fresh UNION ALL SELECT result_id FROM takeover
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
SELECT clock.now, EXISTS (SELECT 1 FROM finished) AS claimed, (SELECT count(*) FROM effect) AS effect, prev.*
FROM clock LEFT JOIN prev ON true
