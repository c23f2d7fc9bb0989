-- take_abandoned_runs.sql: the completer's take. It takes over up to $3
-- unfinished runs of the named operations whose key's lease passed (their
-- runner died, or parked the run after a transient failure), giving each
-- key a new claim token and a lease, and returns the runs with their
-- tokens. FOR UPDATE SKIP LOCKED: replicas taking at once take different
-- runs, and a key a runner is saving right now is left to it.
--
-- Parameters:
--   $1 now         the test clock; NULL for the database clock
--   $2 operations  the operations this completer can run (text[])
--   $3 batch       at most this many runs
--   $4 lease_us    the new lease, in microseconds
--
-- A retry that takes the same key over (claim_run.sql) locks the same
-- row and rechecks the lease, so of the two one wins, and the other's
-- token no longer holds the key.
WITH clock AS (
    SELECT coalesce($1::timestamptz, now()) AS now
), due AS (
    SELECT k.actor_id, k.operation, k.idem_key
    FROM runs r
    JOIN idempotency_keys k USING (actor_id, operation, idem_key)
    CROSS JOIN clock
    WHERE r.state IN ('running', 'compensating') AND r.operation = ANY ($2::text[])
      AND k.state = 'in_progress' AND k.lease_until <= clock.now
    ORDER BY k.lease_until
    LIMIT $3
    FOR UPDATE OF k SKIP LOCKED
), taken AS (
    UPDATE idempotency_keys k SET claim_token = gen_random_uuid(),
        lease_until = clock.now + $4::bigint * interval '1 microsecond'
    FROM due CROSS JOIN clock
    WHERE k.actor_id = due.actor_id AND k.operation = due.operation AND k.idem_key = due.idem_key
    RETURNING k.actor_id, k.operation, k.idem_key, k.claim_token
)
SELECT clock.now, taken.claim_token, r.actor_id, r.operation, r.idem_key,
       r.input, r.point, r.state, r.refs, r.refusal, r.attempts, r.last_error, r.started_at
FROM taken
JOIN runs r USING (actor_id, operation, idem_key)
CROSS JOIN clock
