-- purge_expired_keys.sql: delete up to a batch of expired key rows, oldest
-- first: completed ones past their TTL, and abandoned claims past both their
-- TTL and their lease (idempotency.Record.Expired). A claim whose lease is
-- alive is never deleted, nor the key of an unfinished run of several steps
-- (its run, deleted with it, holds what the other systems did: the
-- completer finishes it first). Rows another sweeper holds are skipped.
--
-- Parameters:
--   $1 now    the test clock; NULL for the database clock
--   $2 batch  how many rows at most
WITH clock AS (
    SELECT coalesce($1::timestamptz, now()) AS now
)
DELETE FROM idempotency_keys
WHERE (actor_id, operation, idem_key) IN (
    SELECT k.actor_id, k.operation, k.idem_key
    FROM idempotency_keys k, clock
    WHERE (k.expires_at <= clock.now AND (k.state = 'completed' OR k.lease_until <= clock.now))
      AND (k.state = 'completed' OR NOT EXISTS (
          SELECT 1 FROM runs r
          WHERE r.actor_id = k.actor_id AND r.operation = k.operation AND r.idem_key = k.idem_key))
    ORDER BY k.expires_at
    LIMIT $2::integer
    FOR UPDATE OF k SKIP LOCKED
)
