-- resume_run.sql: an operator's resume of a run that needs attention, once
-- its cause is dealt with: the run goes back to running (or compensating,
-- if a refusal was being undone) with its turns and its limit counted
-- afresh, and its key's lease ends now, so the completer takes it at its
-- next round. It returns whether there was such a run.
--
-- Parameters:
--   $1 now        the test clock; NULL for the database clock
--   $2 actor_id   the scope: the actor,
--   $3 operation  the operation,
--   $4 idem_key   and the Idempotency-Key
WITH clock AS (
    SELECT coalesce($1::timestamptz, now()) AS now
), resumed AS (
    UPDATE runs r SET
        state = CASE WHEN r.refusal IS NULL THEN 'running' ELSE 'compensating' END::run_state,
        attempts = 0, started_at = clock.now, updated_at = clock.now,
        last_error = 'resumed by an operator after: ' || coalesce(r.last_error, '')
    FROM clock
    WHERE r.actor_id = $2 AND r.operation = $3 AND r.idem_key = $4 AND r.state = 'needs_attention'
    RETURNING r.actor_id, r.operation, r.idem_key
), freed AS (
    UPDATE idempotency_keys k SET lease_until = clock.now
    FROM resumed CROSS JOIN clock
    WHERE k.actor_id = resumed.actor_id AND k.operation = resumed.operation
      AND k.idem_key = resumed.idem_key AND k.state = 'in_progress'
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM freed) AS resumed
