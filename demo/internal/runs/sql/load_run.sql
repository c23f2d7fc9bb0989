-- load_run.sql: read a scope's run, if any (its columns NULL when there is
-- none), and the store's time.
--
-- Parameters:
--   $1 now        the test clock; NULL for the database clock
--   $2 actor_id   the scope: the actor,
--   $3 operation  the operation,
--   $4 idem_key   and the Idempotency-Key
WITH clock AS (
    SELECT coalesce($1::timestamptz, now()) AS now
)
SELECT clock.now, r.input, r.point, r.state, r.refs, r.refusal, r.attempts, r.last_error, r.started_at
FROM clock LEFT JOIN runs r
    ON r.actor_id = $2 AND r.operation = $3 AND r.idem_key = $4
