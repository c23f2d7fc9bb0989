-- purge_expired_keys.sql: delete up to $6 batch expired key rows, first to
-- expire first, after the row where the sweep's last batch ended ($2
-- expires_at, $3 actor_id, $4 operation, $5 idem_key; $2 NULL: from the
-- start): completed ones past their TTL, and abandoned claims past both
-- their TTL and their lease (nothing committed under them: a finish needs
-- its claim). A live claim is never deleted; rows another sweeper holds are
-- skipped. $1 now: the test clock; NULL for the database clock.
--
-- It returns how many it deleted, how many it picked (candidates) and the
-- last of them: the sweep goes on after it while a batch is full. A row the
-- DELETE leaves (a trigger kept it, as a service may keep a key whose work
-- is unfinished) is so passed over once a sweep, not picked by every batch.
--
-- Both kinds are taken in the order the mark moves in (expires_at, then the
-- scope): a claim taken by any other order (say, oldest claimed first) could
-- lie before the mark and never be reached while a batch of kept keys came
-- first. Completed keys are read through idempotency_keys_expires_at, claims
-- through idempotency_keys_in_progress (the claims alone, a few: sorted
-- there); lease_until IS NULL is "completed" by the table's CHECKs. The clock
-- and the mark are compared in each WHERE so that they bound the index scan:
-- from a CTE they would filter above the scan, which then reads the whole
-- index when fewer than a batch are due.
WITH completed AS (
    SELECT k.actor_id, k.operation, k.idem_key, k.expires_at
    FROM idempotency_keys k
    WHERE k.lease_until IS NULL AND k.expires_at <= coalesce($1::timestamptz, now())
      AND (k.expires_at, k.actor_id, k.operation, k.idem_key) > (coalesce($2::timestamptz, '-infinity'), $3::text, $4::text, $5::text)
    ORDER BY k.expires_at, k.actor_id, k.operation, k.idem_key
    LIMIT $6::integer
    FOR UPDATE OF k SKIP LOCKED
), abandoned AS (
    SELECT k.actor_id, k.operation, k.idem_key, k.expires_at
    FROM idempotency_keys k
    WHERE k.lease_until IS NOT NULL AND k.lease_until <= coalesce($1::timestamptz, now())
      AND k.expires_at <= coalesce($1::timestamptz, now())
      AND (k.expires_at, k.actor_id, k.operation, k.idem_key) > (coalesce($2::timestamptz, '-infinity'), $3::text, $4::text, $5::text)
    ORDER BY k.expires_at, k.actor_id, k.operation, k.idem_key
    LIMIT $6::integer
    FOR UPDATE OF k SKIP LOCKED
), doomed AS (
    SELECT actor_id, operation, idem_key, expires_at FROM completed
    UNION ALL
    SELECT actor_id, operation, idem_key, expires_at FROM abandoned
    ORDER BY expires_at, actor_id, operation, idem_key
    LIMIT $6::integer
), deleted AS (
    DELETE FROM idempotency_keys
    WHERE (actor_id, operation, idem_key) IN (SELECT actor_id, operation, idem_key FROM doomed)
    RETURNING 1
)
SELECT (SELECT count(*) FROM deleted) AS deleted, count(*) OVER () AS candidates,
       expires_at, actor_id, operation, idem_key
FROM doomed
ORDER BY expires_at DESC, actor_id DESC, operation DESC, idem_key DESC
LIMIT 1
