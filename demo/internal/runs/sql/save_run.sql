-- save_run.sql: write a run's recovery point, state and references, and
-- renew its key's lease, only while the caller's claim token holds the key:
-- a runner that lost its lease (another took the key over) writes nothing,
-- and learns it from saved = false. The first save of a run inserts it.
--
-- Parameters:
--   $1  now          the test clock; NULL for the database clock
--   $2  lease_us     the key's lease from now, in microseconds
--   $3  actor_id     the scope: the actor,
--   $4  operation    the operation,
--   $5  idem_key     and the Idempotency-Key
--   $6  claim_token  the token of the caller's claim
--   $7  input        the run: the operation's input,
--   $8  point        its last recovery point,
--   $9  state        its state,
--   $10 refs         the other systems' references,
--   $11 refusal      the answer a refusal will store (NULL for none),
--   $12 attempts     the turns taken,
--   $13 last_error   why the last turn stopped (NULL for none)
--   $14 started_at   and when it started
--
-- owner updates the key row by its token, so it takes the row's lock: a
-- takeover that committed first has changed the token and owner finds
-- nothing; one that comes after waits for this transaction, and fences
-- this runner out from then on. The caller commits a local step's business
-- write in the same transaction (package runs, SaveRun).
--
-- A recovery point must be fenced, not durable, so it commits without
-- waiting for its WAL flush (synchronous_commit off for this transaction
-- alone), as a claim does. A crash may lose the last points, never an
-- answer: the finish commits durably, and flushing it flushes every point
-- before it. A lost point after a call to another system is found again
-- there (the next runner asks before it sends); a lost local step is lost
-- with its business write, and runs again.
WITH clock AS (
    SELECT coalesce($1::timestamptz, now()) AS now
), owner AS (
    UPDATE idempotency_keys SET lease_until = clock.now + $2::bigint * interval '1 microsecond'
    FROM clock
    WHERE actor_id = $3 AND operation = $4 AND idem_key = $5
      AND claim_token = $6::uuid AND state = 'in_progress'
    RETURNING actor_id, operation, idem_key
), saved AS (
    INSERT INTO runs AS r (actor_id, operation, idem_key, input, point, state, refs,
        refusal, attempts, last_error, started_at, updated_at)
    SELECT owner.actor_id, owner.operation, owner.idem_key, $7::jsonb, $8, $9::run_state, $10::jsonb,
        $11::jsonb, $12::integer, $13, $14::timestamptz, clock.now
    FROM owner CROSS JOIN clock
    ON CONFLICT (actor_id, operation, idem_key) DO UPDATE SET
        input = excluded.input, point = excluded.point, state = excluded.state,
        refs = excluded.refs, refusal = excluded.refusal, attempts = excluded.attempts,
        last_error = excluded.last_error, started_at = excluded.started_at,
        updated_at = excluded.updated_at
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM saved) AS saved
WHERE set_config('synchronous_commit', 'off', true) = 'off'
