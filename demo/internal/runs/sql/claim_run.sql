-- claim_run.sql: the claim of an operation of several steps: the template's
-- claim.sql word for word (TestClaimRunRepeatsTheClaim; its header says what
-- the parts do), with the step-wise run started in the same statement (the
-- CTE started).
-- started writes the run only when the claim wrote the key (claimed), so a
-- claim never exists without what the completer needs to run it once its
-- lease passes, even if its runner died before its first recovery point
-- (take_abandoned_runs.sql). A free scope gets a run at its start; a key
-- taken from a runner that died keeps its run (the new owner continues it);
-- a key reused after its TTL whose run was done starts a new run; one whose
-- run never finished is continued as it was. The run's foreign key is
-- checked at the end of the statement, when the key row is there.
-- Parameters: those of claim.sql, and $9 input (the operation's input, for
-- any runner of the key).
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
), started AS (
    INSERT INTO runs AS r (actor_id, operation, idem_key, input, point, state, refs,
        refusal, attempts, last_error, started_at, updated_at)
    SELECT $2, $3, $4, $9::jsonb, '', 'running', '{}',
        NULL, 0, NULL, clock.now, clock.now
    FROM clock WHERE EXISTS (SELECT 1 FROM claimed)
    ON CONFLICT (actor_id, operation, idem_key) DO UPDATE SET
        input = excluded.input, point = '', state = 'running', refs = '{}',
        refusal = NULL, attempts = 0, last_error = NULL,
        started_at = excluded.started_at, updated_at = excluded.updated_at
    WHERE r.state = 'done'
)
SELECT clock.now, EXISTS (SELECT 1 FROM claimed) AS wrote, 0 AS effect, prev.*
FROM clock LEFT JOIN prev ON true
WHERE set_config('synchronous_commit', 'off', true) = 'off'
