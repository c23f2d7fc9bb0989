-- finish_claim_create_demo_request.sql: the two-phase finish of a demo
-- request's create. ONE statement, hence one transaction, completes the key
-- with its answer only while the caller's claim token still holds it
-- (finished), and FROM it inserts the demo request and its outbox row: a
-- lost lease completes nothing and creates nothing. The key's TTL counts
-- from its answer: the claim set expires_at - created_at to it.
--
-- Parameters:
--   $1  now              the test clock; NULL for the database clock
--   $2  status_code      the stored answer: its status,
--   $3  response_body    its body,
--   $4  response_headers its headers (a JSON object),
--   $5  result_id        and the id of what it created
--   $6  actor_id         the scope: the actor,
--   $7  operation        the operation,
--   $8  idem_key         and the Idempotency-Key
--   $9  claim_token      the token of the caller's claim
--   $10 id               the demo request: its id,
--   $11 state            its state,
--   $12 topic            its topic,
--   $13 note             its note,
--   $14 created_at       and its creation time
--
-- finished and effect are at most one row each (the scope is the primary
-- key; the request is one row), so the answer tests them with EXISTS rather
-- than count(*): no Aggregate node to set up in every execution, about 23k
-- fewer instructions per finish (444k to 421k).
WITH clock AS (
    SELECT coalesce($1::timestamptz, now()) AS now
), finished AS (
    UPDATE idempotency_keys SET state = 'completed', lease_until = NULL,
        status_code = $2::integer, response_body = $3::bytea,
        response_headers = $4::jsonb, result_id = $5,
        completed_at = clock.now, expires_at = clock.now + (expires_at - created_at)
    FROM clock
    WHERE actor_id = $6 AND operation = $7 AND idem_key = $8
      AND claim_token = $9::uuid AND state = 'in_progress'
    RETURNING result_id
), request AS (
    INSERT INTO demo_requests (id, actor_id, state, topic, note, created_at)
    SELECT $10::uuid, $6, $11, $12, $13, $14::timestamptz
    FROM finished
    RETURNING id, created_at
), effect AS (
    INSERT INTO outbox (request_id, next_attempt_at, created_at, updated_at)
    SELECT id, created_at, created_at, created_at
    FROM request
    RETURNING request_id
)
SELECT EXISTS (SELECT 1 FROM finished) AS claimed, EXISTS (SELECT 1 FROM effect)::integer AS effect
