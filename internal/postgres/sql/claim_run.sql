-- claim_run.sql: claim.sql for an operation of several steps
-- (idempotency.StepWise): claim a free scope and, in the same statement,
-- write its run at its start (no recovery point yet, running, with the
-- operation's input), and return the row the scope had before (prev), if
-- any.
--
-- Parameters (as in claim.sql, then the run's):
--   $1 now          the test clock; NULL for the database clock
--   $2 actor_id     the scope: the actor,
--   $3 operation    the operation,
--   $4 idem_key     and the Idempotency-Key
--   $5 fingerprint  of the request's significant fields
--   $6 claim_token  new on every claim: fences a slow owner out
--   $7 lease_us     the lease, in microseconds
--   $8 ttl_us       how long the key lives, in microseconds
--   $9 input        the operation's input, for any runner of the key
--
-- A step-wise claim never exists without its run: a claim whose runner
-- died before its first recovery point (or never learned that it claimed:
-- its reply was lost) still holds what the completer needs to run it once
-- its lease passes (take_abandoned_runs.sql). The run's row is written FROM
-- the key row the INSERT wrote (started), so it exists exactly when the
-- claim does; its foreign key is checked at the end of the statement, when
-- the key row is there.
--
-- The rest is claim.sql's: its comment says why it does not take over, how
-- prev is read, and why it commits without waiting for its WAL flush.
WITH clock AS (
    SELECT coalesce($1::timestamptz, now()) AS now
), finished AS (
    INSERT INTO idempotency_keys AS k (actor_id, operation, idem_key,
        fingerprint, state, claim_token, lease_until, status_code, response_body,
        response_headers, result_id, created_at, completed_at, expires_at)
    SELECT $2, $3, $4,
        $5, 'in_progress', $6::uuid, clock.now + $7::bigint * interval '1 microsecond', NULL, NULL,
        NULL, NULL, clock.now, NULL, clock.now + $8::bigint * interval '1 microsecond'
    FROM clock
    ON CONFLICT (actor_id, operation, idem_key) DO NOTHING
    RETURNING k.actor_id, k.operation, k.idem_key, k.created_at
), started AS (
    INSERT INTO runs (actor_id, operation, idem_key, input, point, state, refs,
        refusal, attempts, last_error, started_at, updated_at)
    SELECT actor_id, operation, idem_key, $9::jsonb, '', 'running', '{}',
        NULL, 0, NULL, created_at, created_at
    FROM finished
)
SELECT coalesce($1::timestamptz, now()) AS now, EXISTS (SELECT 1 FROM finished) AS claimed, 0 AS effect, prev.*
FROM (SELECT) AS one LEFT JOIN (
    SELECT fingerprint, state, lease_until, status_code, response_body,
           response_headers, result_id, created_at, completed_at, expires_at
    FROM idempotency_keys
    WHERE actor_id = $2 AND operation = $3 AND idem_key = $4
      AND NOT EXISTS (SELECT 1 FROM finished)
) AS prev ON true
WHERE set_config('synchronous_commit', 'off', true) = 'off'
