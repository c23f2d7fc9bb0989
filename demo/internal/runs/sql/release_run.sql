-- release_run.sql: let go of a step-wise claim whose runner could not
-- learn what the database holds (its claim's reply or a save was lost: the
-- database restarted, or was cut off), only while the caller's claim token
-- still holds the key, in progress. It is what release_claim.sql is to a
-- two-phase claim, and is retried as it is, until the database hears it:
--
--   - a run still at its start (no recovery point, running) has done
--     nothing (its first step is local, and commits with its recovery
--     point): its key is deleted, and its run with it (ON DELETE CASCADE),
--     so the next request with the key runs as a first one; so is a key
--     with no run (claimed before claims wrote their runs);
--   - any other running or compensating run keeps its key, whose lease
--     ends now: the next retry, or the completer, continues it from its
--     recovery point at once instead of after the rest of a lease.
--
-- A run that needs attention keeps its key and its lease (an operator
-- resumes it); a finished one is no longer in progress.
--
-- Parameters:
--   $1 now          the test clock; NULL for the database clock
--   $2 actor_id     the scope: the actor,
--   $3 operation    the operation,
--   $4 idem_key     and the Idempotency-Key
--   $5 claim_token  the token of the caller's claim
WITH clock AS (
    SELECT coalesce($1::timestamptz, now()) AS now
), held AS (
    SELECT coalesce(r.point = '' AND r.state = 'running', true) AS unstarted
    FROM idempotency_keys k
    LEFT JOIN runs r USING (actor_id, operation, idem_key)
    WHERE k.actor_id = $2 AND k.operation = $3 AND k.idem_key = $4
      AND k.claim_token = $5::uuid AND k.state = 'in_progress'
      AND (r.state IS NULL OR r.state IN ('running', 'compensating'))
), deleted AS (
    DELETE FROM idempotency_keys k
    USING held
    WHERE held.unstarted AND k.actor_id = $2 AND k.operation = $3 AND k.idem_key = $4
      AND k.claim_token = $5::uuid AND k.state = 'in_progress'
    RETURNING 1
), freed AS (
    UPDATE idempotency_keys k SET lease_until = least(k.lease_until, clock.now)
    FROM held CROSS JOIN clock
    WHERE NOT held.unstarted AND k.actor_id = $2 AND k.operation = $3 AND k.idem_key = $4
      AND k.claim_token = $5::uuid AND k.state = 'in_progress'
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM deleted) AS deleted, EXISTS (SELECT 1 FROM freed) AS freed
