-- claim_takeover.sql: claim.sql, able to take over the scope's row; run only
-- when claim.sql returned a row idempotency.Decide says to take over. It reads
-- the row first (prev), on a new snapshot, writes a new row where there is
-- none (fresh), and takes the row over (takeover) only where Decide would: a
-- completed row past its TTL, or a row in progress whose lease passed, asked
-- again with the same fingerprint (a row in progress never expires). The
-- UPDATE locks only a row it takes over and rechecks the rule under the lock,
-- so of two racing takeovers one wins. Like claim.sql it commits without
-- waiting for its WAL flush.
-- Parameters as in claim.sql: $1 now, $2 actor_id, $3 operation, $4 idem_key,
-- $5 fingerprint, $6 claim_token, $7 lease_us, $8 ttl_us.
WITH clock AS (
    SELECT coalesce($1::timestamptz, now()) AS now
), async_commit AS (
    SELECT set_config('synchronous_commit', 'off', true)
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
        $5, 'in_progress', $6::uuid, clock.now + $7::bigint * interval '1 microsecond', NULL, NULL,
        NULL, NULL, clock.now, NULL, clock.now + $8::bigint * interval '1 microsecond'
    FROM clock WHERE NOT EXISTS (SELECT 1 FROM prev)
    ON CONFLICT (actor_id, operation, idem_key) DO NOTHING
    RETURNING k.result_id
), takeover AS (
    UPDATE idempotency_keys k SET
        fingerprint = $5,
        state = 'in_progress',
        claim_token = $6::uuid,
        lease_until = clock.now + $7::bigint * interval '1 microsecond',
        status_code = NULL,
        response_body = NULL,
        response_headers = NULL,
        result_id = NULL,
        created_at = clock.now,
        completed_at = NULL,
        expires_at = clock.now + $8::bigint * interval '1 microsecond'
    FROM clock
    WHERE k.actor_id = $2 AND k.operation = $3 AND k.idem_key = $4
      AND ((k.state = 'completed' AND k.expires_at <= clock.now)
        OR (k.state = 'in_progress' AND k.lease_until <= clock.now AND k.fingerprint = $5))
    RETURNING k.result_id
), claimed AS (
    SELECT result_id FROM fresh UNION ALL SELECT result_id FROM takeover
)
SELECT clock.now, EXISTS (SELECT 1 FROM claimed) AS claimed, 0 AS effect, prev.*
FROM clock CROSS JOIN async_commit LEFT JOIN prev ON true
