-- create_demo_request_takeover.sql: create_demo_request.sql, able to take over
-- the scope's row as claim_takeover.sql does; run only when
-- create_demo_request.sql returned a row idempotency.Decide says to take over.
-- Parameters as in create_demo_request.sql: $1 now, $2 actor_id, $3 operation,
-- $4 idem_key, $5 fingerprint, $6 claim_token, $7 status_code,
-- $8 response_body, $9 response_headers, $10 result_id, $11 ttl_us, $12 id,
-- $13 state, $14 topic, $15 note, $16 created_at.
WITH clock AS (
    SELECT coalesce($1::timestamptz, now()) AS now
), prev AS (
    SELECT fingerprint, state, lease_until, status_code, response_body,
           response_headers, result_id, created_at, completed_at, expires_at
    FROM idempotency_keys
    WHERE actor_id = $2 AND operation = $3 AND idem_key = $4
), fresh AS (
    INSERT INTO idempotency_keys AS k (actor_id, operation, idem_key,
        fingerprint, state, claim_token, lease_until, status_code, response_body,
        response_headers, result_id, created_at, completed_at, expires_at)
    SELECT $2, $3, $4,
        $5, 'completed', $6::uuid, NULL, $7::integer, $8::bytea,
        $9::jsonb, $10, clock.now, clock.now, clock.now + $11::bigint * interval '1 microsecond'
    FROM clock WHERE NOT EXISTS (SELECT 1 FROM prev)
    ON CONFLICT (actor_id, operation, idem_key) DO NOTHING
    RETURNING k.result_id
), takeover AS (
    UPDATE idempotency_keys k SET
        fingerprint = $5,
        state = 'completed',
        claim_token = $6::uuid,
        lease_until = NULL,
        status_code = $7::integer,
        response_body = $8::bytea,
        response_headers = $9::jsonb,
        result_id = $10,
        created_at = clock.now,
        completed_at = clock.now,
        expires_at = clock.now + $11::bigint * interval '1 microsecond'
    FROM clock
    WHERE k.actor_id = $2 AND k.operation = $3 AND k.idem_key = $4
      AND ((k.state = 'completed' AND k.expires_at <= clock.now)
        OR (k.state = 'in_progress' AND k.lease_until <= clock.now AND k.fingerprint = $5))
    RETURNING k.result_id
), finished AS (
    SELECT result_id FROM fresh UNION ALL SELECT result_id FROM takeover
), request AS (
    INSERT INTO demo_requests (id, actor_id, state, topic, note, created_at)
    SELECT $12::uuid, $2, $13, $14, $15, $16::timestamptz
    FROM finished
    RETURNING id, actor_id, created_at
), effect AS (
    INSERT INTO outbox (request_id, actor_id, next_attempt_at, created_at, updated_at)
    SELECT id, actor_id, created_at, created_at, created_at
    FROM request
    RETURNING request_id
)
SELECT clock.now, EXISTS (SELECT 1 FROM finished) AS claimed, (SELECT count(*) FROM effect) AS effect, prev.*
FROM clock LEFT JOIN prev ON true
