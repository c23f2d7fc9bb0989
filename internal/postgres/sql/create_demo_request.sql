-- create_demo_request.sql: the one-phase create of a demo request, for a free
-- scope. One statement, one durable commit: the key row completed with its
-- answer (finished) and, FROM it, the demo request and its outbox row, due at
-- once (the dispatcher calls the review desk, never the request). Where the
-- scope is taken it writes nothing and returns the row there (prev), as
-- claim.sql does, which explains the parts.
--
-- Parameters: $1 now (the test clock; NULL for the database clock); the scope:
-- $2 actor_id, $3 operation, $4 idem_key; $5 fingerprint; $6 claim_token; the
-- answer: $7 status_code, $8 response_body, $9 response_headers, $10 result_id;
-- $11 ttl_us; the demo request: $12 id, $13 state, $14 topic, $15 note,
-- $16 created_at.
WITH clock AS (
    SELECT coalesce($1::timestamptz, now()) AS now
), finished AS (
    INSERT INTO idempotency_keys AS k (actor_id, operation, idem_key,
        fingerprint, state, claim_token, lease_until, status_code, response_body,
        response_headers, result_id, created_at, completed_at, expires_at)
    SELECT $2, $3, $4,
        $5, 'completed', $6::uuid, NULL, $7::integer, $8::bytea,
        $9::jsonb, $10, clock.now, clock.now, clock.now + $11::bigint * interval '1 microsecond'
    FROM clock
    ON CONFLICT (actor_id, operation, idem_key) DO NOTHING
    RETURNING k.result_id
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
SELECT coalesce($1::timestamptz, now()) AS now, EXISTS (SELECT 1 FROM finished) AS claimed,
    EXISTS (SELECT 1 FROM effect)::integer AS effect, prev.*
FROM (SELECT) AS one LEFT JOIN (
    SELECT fingerprint, state, lease_until, status_code, response_body,
           response_headers, result_id, created_at, completed_at, expires_at
    FROM idempotency_keys
    WHERE actor_id = $2 AND operation = $3 AND idem_key = $4
      AND NOT EXISTS (SELECT 1 FROM finished)
) AS prev ON true
