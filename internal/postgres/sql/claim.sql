-- claim.sql: claim a free scope for a two-phase request: write its key row in
-- progress, owned by the claim token until the lease ends; where the scope is
-- taken, write nothing and return the row there (prev).
-- Parameters: $1 now (the test clock; NULL for the database clock); the scope:
-- $2 actor_id, $3 operation, $4 idem_key; $5 fingerprint; $6 claim_token (new
-- on every claim: it fences a slow owner out); $7 lease_us; $8 ttl_us.
--
-- One statement, committed on its own, so a concurrent request sees the row at
-- once and the unique index decides the race: ON CONFLICT DO NOTHING waits on
-- it for an uncommitted writer of the scope, and where the scope is taken
-- skips without a lock or a write.
-- prev reads the row only when the INSERT skipped (its NOT EXISTS names no
-- column, so it is tested once, before the scan); a row committed after the
-- snapshot is not there, and the caller runs the statement again. Rows to
-- take over are rare and an UPDATE here would cost every claim, so
-- claim_takeover.sql takes over, when idempotency.Decide says so.
-- A claim must be visible, not durable, so it commits without waiting for its
-- WAL flush: a crash may lose a claim, never a creation (the durable finish
-- finds no row and creates nothing; the retry claims again).
-- set_config, the final filter, makes this transaction's commit asynchronous.
WITH clock AS (
    SELECT coalesce($1::timestamptz, now()) AS now
), claimed AS (
    INSERT INTO idempotency_keys AS k (actor_id, operation, idem_key,
        fingerprint, state, claim_token, lease_until, status_code, response_body,
        response_headers, result_id, created_at, completed_at, expires_at)
    SELECT $2, $3, $4,
        $5, 'in_progress', $6::uuid, clock.now + $7::bigint * interval '1 microsecond', NULL, NULL,
        NULL, NULL, clock.now, NULL, clock.now + $8::bigint * interval '1 microsecond'
    FROM clock
    ON CONFLICT (actor_id, operation, idem_key) DO NOTHING
    RETURNING k.result_id
)
SELECT coalesce($1::timestamptz, now()) AS now, EXISTS (SELECT 1 FROM claimed) AS claimed, 0 AS effect, prev.*
FROM (SELECT) AS one LEFT JOIN (
    SELECT fingerprint, state, lease_until, status_code, response_body,
           response_headers, result_id, created_at, completed_at, expires_at
    FROM idempotency_keys
    WHERE actor_id = $2 AND operation = $3 AND idem_key = $4
      AND NOT EXISTS (SELECT 1 FROM claimed)
) AS prev ON true
WHERE set_config('synchronous_commit', 'off', true) = 'off'
