-- claim_run.sql: the claim of an operation of several steps: the template's
-- claim.sql, word for word, with its run started in the same statement (the
-- CTE started), so a claim never exists without the run that any runner
-- needs to continue it.
--
-- claim.sql: claim a free scope for a two-phase request: write its key row
-- in progress, owned by the claim token until the lease ends, and return the
-- row the scope had before (prev), if any.
--
-- Parameters:
--   $1 now          the test clock; NULL for the database clock
--   $2 actor_id     the scope: the actor,
--   $3 operation    the operation,
--   $4 idem_key     and the Idempotency-Key
--   $5 fingerprint  of the request's significant fields
--   $6 claim_token  new on every claim: fences a slow owner out
--   $7 lease_us     the lease, in microseconds
--   $8 ttl_us       how long the key is replayed once answered, in microseconds
--
-- It is one statement, committed on its own, so a concurrent request sees
-- the row at once, and the unique scope decides the race. Its parts run on
-- one snapshot:
--
--   - claimed is the row the INSERT wrote, if any; ON CONFLICT DO NOTHING
--     skips it, without a lock or a write, when the scope is taken. A
--     concurrent request that has written or is changing the row and has
--     not committed yet (a first request, a finish, a release) makes it
--     wait on the unique index for that commit, then decide;
--   - prev reads the row there only when the INSERT skipped: its NOT
--     EXISTS on claimed names no column, so PostgreSQL tests it once,
--     before the scan, and a claim that wrote skips the read. A request
--     that does not write learns in the same round trip whether to replay,
--     wait or refuse. prev reads the row as the snapshot has it: a row
--     committed after the statement began is not there, so the caller runs
--     the statement again and finds it.
--
-- So a replay or a 409 writes nothing: it costs a read, not a commit. A
-- first attempt, what most requests are, reads its scope once, in the
-- INSERT's unique check, not again for a row that is not there. A
-- duplicate pays for that: its skipped INSERT checks the new row's CHECKs
-- before it finds the conflict (a duplicate of a create: 426k to 517k
-- instructions, docs/bench.md). So a retry that says so (X-Client-Attempt: 2)
-- reads first (lookup_key.sql), since its row is most likely there.
--
-- Rows to take over are rare (a key reused after its TTL, an owner that
-- died), and an UPDATE costs PostgreSQL about a tenth of the statement to
-- set up even when it changes nothing. So this statement does not take over;
-- claim_takeover.sql does, and runs only when this one found a row to take
-- over (idempotency.Decide); it reads the row again on a new snapshot and
-- decides afresh.
--
-- A claim must be visible at once, not durable, so it commits without
-- waiting for its WAL flush (synchronous_commit off for this transaction
-- alone). A crash may lose a claim, never a creation: the finish commits
-- durably, and flushing its commit flushes the claim before it; a finish
-- whose claim was lost finds no row, creates nothing, and the retry claims
-- again.
--
-- Fewer plan nodes, as in create_demo_request.sql: clock is referenced once
-- (in claimed), so PostgreSQL inlines it instead of materialising it, and
-- the final SELECT computes the same coalesce($1, now()) (now() is one
-- value per transaction); the set_config that makes the commit asynchronous
-- is the final SELECT's filter, evaluated for its one row, instead of a CTE
-- joined in. About 13k fewer instructions per claim (261k to 248k).
--
-- started: the run an operation of several steps writes in the statement
-- that claims its key, after the claim's own CTEs. A step-wise claim
-- never exists without its run: a claim whose runner died before its
-- first recovery point (or never learned that it claimed: its
-- reply was lost) still holds what the completer needs to run it once its
-- lease passes (take_abandoned_runs.sql).
--
--   $9 input        the operation's input, for any runner of the key
--
-- It writes the run only when the claim took the scope (claimed): a run at
-- its start for a free scope; for a key taken over, a key taken from a
-- runner that died keeps its run as it stands (the new owner continues it
-- from its recovery point), a key reused after its TTL whose run was done
-- starts a new run for the new intent, one whose run never finished (no
-- completer ran it) is continued as it was. Its foreign key is checked at
-- the end of the statement, when the key row is there.
WITH clock AS (
    SELECT coalesce($1::timestamptz, now()) AS now
), claimed AS (
    INSERT INTO idempotency_keys AS k (actor_id, operation, idem_key,
        fingerprint, state, claim_token, lease_until, status_code, response_body,
        response_headers, result_id, created_at, completed_at, expires_at)
    SELECT $2, $3, $4,
        $5, 'in_progress', $6::uuid, clock.now + $7::bigint * interval '1 microsecond', NULL, NULL,
        NULL, NULL, clock.now, NULL, clock.now + $8::bigint * interval '1 microsecond'
    FROM clock
    ON CONFLICT (actor_id, operation, idem_key) DO NOTHING
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
SELECT coalesce($1::timestamptz, now()) AS now, EXISTS (SELECT 1 FROM claimed) AS claimed, 0 AS effect, prev.*
FROM (SELECT) AS one LEFT JOIN (
    SELECT fingerprint, state, lease_until, status_code, response_body,
           response_headers, result_id, created_at, completed_at, expires_at
    FROM idempotency_keys
    WHERE actor_id = $2 AND operation = $3 AND idem_key = $4
      AND NOT EXISTS (SELECT 1 FROM claimed)
) AS prev ON true
WHERE set_config('synchronous_commit', 'off', true) = 'off'
