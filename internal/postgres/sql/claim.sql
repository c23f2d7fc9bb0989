-- claim.sql: claim a key for a two-phase request: write its row in progress,
-- owned by the claim token until the lease ends, where the key is free or
-- its row may be taken over; otherwise write nothing. It returns the row
-- that was there (prev), as create_demo_request.sql does, which explains
-- the parts.
-- Parameters: $1 now (the test clock; NULL for the database clock); the scope:
-- $2 actor_id, $3 operation, $4 idem_key; $5 fingerprint; $6 claim_token (new
-- on every claim: it fences a slow owner out); $7 lease_us; $8 ttl_us.
--
-- One statement, committed on its own, so a concurrent request sees the row
-- at once. A claim must be visible, not durable, so it commits without
-- waiting for its WAL flush: a crash may lose a claim, never a creation (the
-- durable finish finds no row and creates nothing; the retry claims again).
-- set_config, the final filter, makes this transaction's commit asynchronous.
WITH clock AS (
    SELECT coalesce($1::timestamptz, now()) AS now
), prev AS MATERIALIZED (
    SELECT fingerprint, state, lease_until, status_code, response_body,
           response_headers, result_id, created_at, completed_at, expires_at
    FROM idempotency_keys
    WHERE actor_id = $2 AND operation = $3 AND idem_key = $4
), claimed AS (
    INSERT INTO idempotency_keys AS k (actor_id, operation, idem_key,
        fingerprint, state, claim_token, lease_until, status_code, response_body,
        response_headers, result_id, created_at, completed_at, expires_at)
    SELECT $2, $3, $4,
        $5, 'in_progress', $6::uuid, clock.now + $7::bigint * interval '1 microsecond', NULL, NULL,
        NULL, NULL, clock.now, NULL, clock.now + $8::bigint * interval '1 microsecond'
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
)
SELECT clock.now, EXISTS (SELECT 1 FROM claimed) AS wrote, 0 AS effect, prev.*
FROM clock LEFT JOIN prev ON true
WHERE set_config('synchronous_commit', 'off', true) = 'off'
