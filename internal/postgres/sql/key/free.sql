-- free.sql: the one-phase statement of an operation with an effect, for a
-- free scope. One statement, one commit: it inserts the key row already
-- completed with its answer (finished) and, FROM that row, the operation's
-- effect (sql/effect/<name>.sql), so the business change happens exactly
-- when the key is completed. Where the scope is taken it writes nothing
-- and returns the row there (prev), as claim.sql does, which explains the
-- parts. effect is how many rows the effect's CTE "effect" wrote.
--
-- Parameters:
--   $1  now              the test clock; NULL for the database clock
--   $2  actor_id         the scope: the actor,
--   $3  operation        the operation,
--   $4  idem_key         and the Idempotency-Key
--   $5  fingerprint      of the request's significant fields
--   $6  claim_token      the request's token
--   $7  status_code      the stored answer: its status,
--   $8  response_body    its body,
--   $9  response_headers its headers (a JSON object),
--   $10 result_id        and the id of what it changed (NULL for none)
--   $11 ttl_us           how long the key lives, in microseconds
--   then the effect's own (its :1 …), numbered on from here
WITH clock AS (
    SELECT coalesce($1::timestamptz, now()) AS now
), finished AS (
    INSERT INTO idempotency_keys AS k (actor_id, operation, idem_key,
        fingerprint, state, claim_token, lease_until, status_code, response_body,
        response_headers, result_id, created_at, completed_at, expires_at)
    SELECT $2, $3, $4,
        $5, 'completed', $6::uuid, NULL, $7::integer, $8::bytea,
        $9::jsonb, $10, clock.now, clock.now, clock.now + $11::bigint * interval '1 microsecond'
    FROM clock
    ON CONFLICT (actor_id, operation, idem_key) DO NOTHING
    RETURNING k.result_id
), -- the effect, FROM finished:
@effect
)
SELECT clock.now, EXISTS (SELECT 1 FROM finished) AS claimed, (SELECT count(*) FROM effect) AS effect, prev.*
FROM clock LEFT JOIN (
    SELECT fingerprint, state, lease_until, status_code, response_body,
           response_headers, result_id, created_at, completed_at, expires_at
    FROM idempotency_keys
    WHERE actor_id = $2 AND operation = $3 AND idem_key = $4
      AND NOT EXISTS (SELECT 1 FROM finished)
) AS prev ON true
