-- claim_run.sql: the claim of an operation of several steps: the template's
-- claim.sql, its call of write_key word for word (TestClaimRunRepeatsTheClaim),
-- with the step-wise run started in the same statement (the CTE started).
-- started writes the run only when the claim wrote the key (k.wrote), so a
-- claim never exists without what the completer needs to run it once its
-- lease passes, even if its runner died before its first recovery point
-- (take_abandoned_runs.sql). A free scope gets a run at its start; a key
-- taken from a runner that died keeps its run (the new owner continues it);
-- a key reused after its TTL whose run was done starts a new run; one whose
-- run never finished is continued as it was. The run's foreign key is
-- checked at the end of the statement, when the key row is there.
-- Parameters: those of claim.sql, and $9 input (the operation's input, for
-- any runner of the key).
WITH k AS MATERIALIZED (
    SELECT * FROM write_key($1, $2, $3, $4, $5, false, $6, $7, $8, NULL, NULL, NULL, NULL)
), started AS (
    INSERT INTO runs AS r (actor_id, operation, idem_key, input, point, state, refs,
        refusal, attempts, last_error, started_at, updated_at)
    SELECT $2, $3, $4, $9::jsonb, '', 'running', '{}',
        NULL, 0, NULL, k.now, k.now
    FROM k WHERE k.wrote
    ON CONFLICT (actor_id, operation, idem_key) DO UPDATE SET
        input = excluded.input, point = '', state = 'running', refs = '{}',
        refusal = NULL, attempts = 0, last_error = NULL,
        started_at = excluded.started_at, updated_at = excluded.updated_at
    WHERE r.state = 'done'
)
SELECT k.*
FROM k
