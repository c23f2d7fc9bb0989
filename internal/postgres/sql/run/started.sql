-- sql/run/started.sql: the run an operation of several steps
-- (idempotency.StepWise) writes in the statement that claims its key, as
-- the CTE "started" after claim.sql's or claim_takeover.sql's own (composed
-- at start-up as claim_run.sql and claim_run_takeover.sql, see runs.go). A
-- step-wise claim never exists without its run: a claim whose runner died
-- before its first recovery point (or never learned that it claimed: its
-- reply was lost) still holds what the completer needs to run it once its
-- lease passes (take_abandoned_runs.sql).
--
--   $9 input        the operation's input, for any runner of the key
--
-- It writes the run only when the claim took the scope (finished): a run at
-- its start for a free scope; for a key taken over, a key taken from a
-- runner that died keeps its run as it stands (the new owner continues it
-- from its recovery point), a key reused after its TTL whose run was done
-- starts a new run for the new intent, one whose run never finished (no
-- completer ran it) is continued as it was. Its foreign key is checked at
-- the end of the statement, when the key row is there.
    INSERT INTO runs AS r (actor_id, operation, idem_key, input, point, state, refs,
        refusal, attempts, last_error, started_at, updated_at)
    SELECT $2, $3, $4, $9::jsonb, '', 'running', '{}',
        NULL, 0, NULL, clock.now, clock.now
    FROM clock WHERE EXISTS (SELECT 1 FROM finished)
    ON CONFLICT (actor_id, operation, idem_key) DO UPDATE SET
        input = excluded.input, point = '', state = 'running', refs = '{}',
        refusal = NULL, attempts = 0, last_error = NULL,
        started_at = excluded.started_at, updated_at = excluded.updated_at
    WHERE r.state = 'done'
