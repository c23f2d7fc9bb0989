-- finish_claim_create_demo_request.sql: the two-phase finish of a create. One
-- statement completes the key with its answer only while the caller's claim
-- token holds it in progress (finished), and FROM it inserts the demo request
-- and its outbox row: a lost lease completes nothing and creates nothing. The
-- TTL counts from the answer: the claim set expires_at - created_at to it.
-- Parameters: $1 now (NULL: the database clock); the answer: $2 status_code,
-- $3 response_body, $4 response_headers, $5 result_id; the scope: $6 actor_id,
-- $7 operation, $8 idem_key; $9 claim_token; the demo request: $10 id,
-- $11 state, $12 topic, $13 note, $14 created_at.
WITH clock AS (
    SELECT coalesce($1::timestamptz, now()) AS now
), finished AS (
    UPDATE idempotency_keys SET state = 'completed', lease_until = NULL,
        status_code = $2::integer, response_body = $3::bytea,
        response_headers = $4::jsonb, result_id = $5,
        completed_at = clock.now,
        -- the TTL added in UTC: timestamp + interval is immutable, where
        -- timestamptz + interval is not, which Citus refuses beside columns
        expires_at = ((clock.now AT TIME ZONE 'UTC') + (expires_at - created_at)) AT TIME ZONE 'UTC'
    FROM clock
    WHERE actor_id = $6 AND operation = $7 AND idem_key = $8
      AND claim_token = $9::uuid AND state = 'in_progress'
    RETURNING result_id
), request AS (
    INSERT INTO demo_requests (id, actor_id, state, topic, note, created_at)
    SELECT $10::uuid, $6, $11, $12, $13, $14::timestamptz
    FROM finished
    RETURNING id, actor_id, created_at
), effect AS (
    INSERT INTO outbox (request_id, actor_id, next_attempt_at, created_at, updated_at)
    SELECT id, actor_id, created_at, created_at, created_at
    FROM request
    RETURNING request_id
)
SELECT EXISTS (SELECT 1 FROM finished) AS wrote, EXISTS (SELECT 1 FROM effect)::integer AS effect
