-- purge_expired_keys.sql: delete up to $2 batch expired key rows, first to
-- expire first: completed ones past their TTL, and abandoned claims past both
-- their TTL and their lease (nothing committed under them: a finish needs its
-- claim). A live claim is never deleted; rows another sweeper holds are
-- skipped. $1 now: the test clock; NULL for the database clock.
--
-- Each kind is read through its own index in the order it expires (completed
-- keys: idempotency_keys_expires_at; claims: idempotency_keys_in_progress,
-- oldest first); lease_until IS NULL is "completed" by the table's CHECKs. The
-- clock is compared in each WHERE so that it bounds the index scan: from a CTE
-- it would filter above the scan, which then reads the whole index when fewer
-- than a batch are due.
WITH completed AS (
    SELECT k.actor_id, k.operation, k.idem_key, k.expires_at
    FROM idempotency_keys k
    WHERE k.lease_until IS NULL AND k.expires_at <= coalesce($1::timestamptz, now())
    ORDER BY k.expires_at
    LIMIT $2::integer
    FOR UPDATE OF k SKIP LOCKED
), abandoned AS (
    SELECT k.actor_id, k.operation, k.idem_key, k.expires_at
    FROM idempotency_keys k
    WHERE k.lease_until IS NOT NULL AND k.lease_until <= coalesce($1::timestamptz, now())
      AND k.expires_at <= coalesce($1::timestamptz, now())
    ORDER BY k.created_at
    LIMIT $2::integer
    FOR UPDATE OF k SKIP LOCKED
), doomed AS (
    SELECT actor_id, operation, idem_key, expires_at FROM completed
    UNION ALL
    SELECT actor_id, operation, idem_key, expires_at FROM abandoned
    ORDER BY expires_at
    LIMIT $2::integer
)
DELETE FROM idempotency_keys
WHERE (actor_id, operation, idem_key) IN (SELECT actor_id, operation, idem_key FROM doomed)
