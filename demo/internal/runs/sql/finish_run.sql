-- finish_run.sql: complete a run's key with its answer and mark the run
-- done, only while the caller's claim token holds the key. The caller
-- commits the answer's business write in the same transaction (package
-- runs, FinishRun). The key's TTL counts from its answer: the claim
-- set expires_at - created_at to it.
--
-- Parameters:
--   $1  now              the test clock; NULL for the database clock
--   $2  status_code      the stored answer: its status,
--   $3  response_body    its body,
--   $4  response_headers its headers (a JSON object),
--   $5  result_id        and the id of what it created or changed (NULL for none)
--   $6  actor_id         the scope: the actor,
--   $7  operation        the operation,
--   $8  idem_key         and the Idempotency-Key
--   $9  claim_token      the token of the caller's claim
WITH clock AS (
    SELECT coalesce($1::timestamptz, now()) AS now
), finished AS (
    UPDATE idempotency_keys SET state = 'completed', lease_until = NULL,
        status_code = $2::integer, response_body = $3::bytea,
        response_headers = $4::jsonb, result_id = $5,
        completed_at = clock.now, expires_at = clock.now + (expires_at - created_at)
    FROM clock
    WHERE actor_id = $6 AND operation = $7 AND idem_key = $8
      AND claim_token = $9::uuid AND state = 'in_progress'
    RETURNING actor_id, operation, idem_key
), done AS (
    UPDATE runs r SET state = 'done', updated_at = clock.now
    FROM finished CROSS JOIN clock
    WHERE r.actor_id = finished.actor_id AND r.operation = finished.operation
      AND r.idem_key = finished.idem_key
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM finished) AS wrote, EXISTS (SELECT 1 FROM done) AS done
