-- create_demo_request.sql: the one-phase create of a demo request. One
-- statement, one durable commit: the key row completed with its answer
-- (finished) and, FROM it, the demo request and its outbox row, due at once
-- (the dispatcher calls the review desk, never the request). Where the key
-- is taken it writes nothing and returns the row there (prev).
--
-- The unique index decides the race: the INSERT waits on it for an
-- uncommitted writer of the scope, and ON CONFLICT takes the row over only
-- where its WHERE holds, rechecked under the row's lock, so of two racing
-- takeovers one wins. prev is the row as the statement's snapshot saw it: a
-- row committed after the snapshot is not there, and the Runner runs the
-- statement again. It is MATERIALIZED so that it is read before the write
-- on Citus too, which runs a CTE's INSERT as a statement of its own, ahead
-- of the rest: inlined, prev would be read after it, and see its row.
--
-- Parameters: $1 now (the test clock; NULL for the database clock); the scope:
-- $2 actor_id, $3 operation, $4 idem_key; $5 fingerprint; $6 claim_token; the
-- answer: $7 status_code, $8 response_body, $9 response_headers, $10 result_id;
-- $11 ttl_us; the demo request: $12 id, $13 state, $14 topic, $15 note,
-- $16 created_at.
WITH clock AS (
    SELECT coalesce($1::timestamptz, now()) AS now
), prev AS MATERIALIZED (
    SELECT fingerprint, state, lease_until, status_code, response_body,
           response_headers, result_id, created_at, completed_at, expires_at
    FROM idempotency_keys
    WHERE actor_id = $2 AND operation = $3 AND idem_key = $4
), finished AS (
    INSERT INTO idempotency_keys AS k (actor_id, operation, idem_key,
        fingerprint, state, claim_token, lease_until, status_code, response_body,
        response_headers, result_id, created_at, completed_at, expires_at)
    SELECT $2, $3, $4,
        $5, 'completed', $6::uuid, NULL, $7::integer, $8::bytea,
        $9::jsonb, $10, clock.now, clock.now, clock.now + $11::bigint * interval '1 microsecond'
    FROM clock
    ON CONFLICT (actor_id, operation, idem_key) DO UPDATE SET
        (fingerprint, state, claim_token, lease_until, status_code, response_body,
         response_headers, result_id, created_at, completed_at, expires_at)
      = (excluded.fingerprint, excluded.state, excluded.claim_token, excluded.lease_until,
         excluded.status_code, excluded.response_body, excluded.response_headers,
         excluded.result_id, excluded.created_at, excluded.completed_at, excluded.expires_at)
    -- where idempotency.Decide takes the row over: its answer expired, or
    -- its owner's lease passed and the same intent asks again
    WHERE (k.state = 'completed' AND k.expires_at <= excluded.created_at)
       OR (k.state = 'in_progress' AND k.lease_until <= excluded.created_at AND k.fingerprint = excluded.fingerprint)
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
SELECT clock.now, EXISTS (SELECT 1 FROM finished) AS wrote, (SELECT count(*) FROM effect) AS effect, prev.*
FROM clock LEFT JOIN prev ON true
