-- load_run.sql: read a scope's run, if any (no row when there is none).
--
-- Parameters:
--   $1 actor_id   the scope: the actor,
--   $2 operation  the operation,
--   $3 idem_key   and the Idempotency-Key
SELECT input, point, state, refs, refusal, attempts, last_error, started_at
FROM runs
WHERE actor_id = $1 AND operation = $2 AND idem_key = $3
