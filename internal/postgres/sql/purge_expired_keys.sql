-- purge_expired_keys.sql: delete up to a batch of expired key rows, the
-- first to expire first: completed ones past their TTL, and abandoned claims
-- past both their TTL and their lease: nothing was committed under such a
-- claim, since the finish needs it. A claim whose lease is alive is never
-- deleted. Rows another sweeper holds are skipped.
--
-- Parameters:
--   $1 now    the test clock; NULL for the database clock
--   $2 batch  how many rows at most
--
-- Each kind is read through its own index: completed keys through
-- idempotency_keys_expires_at, which holds completed keys only (a claim
-- writes no entry there), in the order they expire;
-- claims through idempotency_keys_in_progress, which holds the claims in
-- progress only, oldest first; each takes at most a batch, and the batch
-- deleted is the first to expire of those. lease_until IS NULL is
-- "completed", by the table's CHECKs. The clock is compared in each WHERE
-- itself, so that it bounds the index scan: through a CTE it would be a
-- filter above it, and a statement that finds less than a batch would
-- read the whole index.
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
