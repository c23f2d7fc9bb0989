-- The scans: the statements that read across actors (the dispatcher's take
-- and its marks, the sweeper's purge). Each is a function that takes the
-- tables it reads: on one PostgreSQL its statement in sql/ passes the
-- tables themselves; on Citus, where FOR UPDATE runs only on one shard, the
-- store calls it once per shard with that shard's tables, on the worker
-- that holds them (migrations/citus/scans.sql). So each statement is one
-- text on both backends; format() names the tables (%1$s, %2$s, a regclass
-- as PostgreSQL prints it, quoted where it must be), and the rest binds as
-- parameters, each planned with its values as a statement of the client's.

-- outbox_take_due: take up to a batch of due deliveries, oldest due first,
-- skipping rows another dispatcher holds locked, and lease them to the
-- caller's token: a taken row is due again when the lease passes (its
-- dispatcher died). Each row, an event of its request (kind: a submission,
-- a cancel, or a service's own), the seq-th of its kind, comes with its
-- request's actor (the desk's calls are made for it), topic, note, and
-- whether it is cancelled (never submitted then). A request's events go in
-- the order they were queued (position): one waits while an earlier one is
-- pending. Rows of busy actors, at their limit with the desk (delivery's
-- PerActor), wait.
--
-- due walks the due index in order and stops at the batch. It reads the
-- outbox alone: joined to demo_requests, the planner may join every due row
-- before the LIMIT (a row's request is there: the statement that writes the
-- row writes it FROM its request). And it compares the clock in its WHERE,
-- which bounds the scan: from the clock CTE it would filter above the scan,
-- which then reads every row due later at each take.
CREATE FUNCTION outbox_take_due(outbox regclass, demo_requests regclass,
    at timestamptz, busy text[], batch integer, lease_token uuid, lease_us bigint)
RETURNS TABLE (request_id uuid, actor_id text, kind text, seq integer, attempts integer, topic text, note text, cancelled boolean)
LANGUAGE plpgsql AS $fn$
BEGIN
    RETURN QUERY EXECUTE format($q$
WITH clock AS (
    SELECT coalesce($1::timestamptz, now()) AS now
), due AS (
    SELECT o.request_id, o.kind, o.seq
    FROM %1$s o
    WHERE o.next_attempt_at <= coalesce($1::timestamptz, now()) -- pending, by the table's CHECK
      AND o.actor_id <> ALL ($2::text[])
      AND NOT EXISTS (SELECT 1 FROM %1$s e
                      WHERE e.request_id = o.request_id AND e.actor_id = o.actor_id
                        AND e.position < o.position AND e.state = 'pending')
    ORDER BY o.next_attempt_at
    LIMIT $3::integer
    FOR UPDATE OF o SKIP LOCKED
), taken AS (
    UPDATE %1$s o SET attempts = o.attempts + 1, lease_token = $4::uuid,
        next_attempt_at = clock.now + $5::bigint * interval '1 microsecond',
        updated_at = clock.now
    FROM due, clock
    WHERE o.request_id = due.request_id AND o.kind = due.kind AND o.seq = due.seq
    RETURNING o.request_id, o.actor_id, o.kind, o.seq, o.attempts
)
SELECT taken.request_id, r.actor_id, taken.kind, taken.seq, taken.attempts, r.topic, r.note, r.state = 'cancelled' AS cancelled
FROM taken JOIN %2$s r ON r.id = taken.request_id AND r.actor_id = taken.actor_id
$q$, outbox, demo_requests)
    USING at, busy, batch, lease_token, lease_us;
END
$fn$;

-- outbox_settle: record the marks of deliveries still leased to the token
-- they were taken under; mark i is the i-th element of each array, and a row
-- another dispatcher took since is not matched. It returns how many rows it
-- changed. It commits without waiting for its WAL flush: a mark a crash
-- loses leaves the row taken, due again when its lease passes, and that
-- attempt asks the desk first, as after any crash.
--
-- A submission is withdrawn only while its request is still cancelled: a
-- reopen since the take (a service's reverse transition) finds it pending,
-- puts nothing back and queues its event after the cancel, so here the
-- submission stays pending, due now, and the desk gets the request before
-- its cancel and reopen (a withdrawn mark carries no retry: it is due at
-- once). cancelled locks the requests of the withdrawals
-- (FOR SHARE), so that a reopen either commits first and is seen, or waits
-- for this mark and then finds the submission withdrawn.
CREATE FUNCTION outbox_settle(outbox regclass, demo_requests regclass,
    at timestamptz, request_ids uuid[], kinds text[], seqs integer[], states delivery_state[],
    refs text[], errors text[], retry_us bigint[], lease_tokens uuid[])
RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
    n bigint;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    EXECUTE format($q$
WITH clock AS (
    SELECT coalesce($1::timestamptz, now()) AS now
), given AS (
    SELECT * FROM unnest($2::uuid[], $3::text[], $4::integer[], $5::delivery_state[], $6::text[], $7::text[], $8::bigint[], $9::uuid[])
        AS m(request_id, kind, seq, state, reference, error, retry_us, lease_token)
), cancelled AS (
    SELECT r.id FROM %2$s r
    WHERE r.id IN (SELECT request_id FROM given WHERE state = 'withdrawn') AND r.state = 'cancelled'
    FOR SHARE OF r
), mark AS (
    SELECT g.request_id, g.kind, g.seq, g.reference, g.error, g.retry_us, g.lease_token,
        CASE WHEN g.state = 'withdrawn' AND g.request_id NOT IN (SELECT id FROM cancelled) THEN 'pending' ELSE g.state END AS state
    FROM given g
)
UPDATE %1$s o SET state = mark.state, provider_reference = nullif(mark.reference, ''),
    last_error = nullif(mark.error, ''), lease_token = NULL, updated_at = clock.now,
    next_attempt_at = CASE WHEN mark.state = 'pending'
                           THEN clock.now + mark.retry_us * interval '1 microsecond' END
FROM mark, clock
WHERE o.request_id = mark.request_id AND o.kind = mark.kind AND o.seq = mark.seq AND o.lease_token = mark.lease_token AND o.state = 'pending'
$q$, outbox, demo_requests)
    USING at, request_ids, kinds, seqs, states, refs, errors, retry_us, lease_tokens;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$fn$;

-- purge_expired_keys: delete up to batch expired key rows, first to
-- expire first, after the row where the sweep's last batch ended (the
-- mark: after, after_actor, after_operation, after_key; after NULL: from
-- the start): completed ones past their TTL, and abandoned claims past both
-- their TTL and their lease (nothing committed under them: a finish needs
-- its claim). A live claim is never deleted; rows another sweeper holds are
-- skipped.
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
CREATE FUNCTION purge_expired_keys(idempotency_keys regclass,
    at timestamptz, after timestamptz, after_actor text, after_operation text, after_key text, batch integer)
RETURNS TABLE (deleted bigint, candidates bigint, expires_at timestamptz, actor_id text, operation text, idem_key text)
LANGUAGE plpgsql AS $fn$
BEGIN
    RETURN QUERY EXECUTE format($q$
WITH completed AS (
    SELECT k.actor_id, k.operation, k.idem_key, k.expires_at
    FROM %1$s k
    WHERE k.lease_until IS NULL AND k.expires_at <= coalesce($1::timestamptz, now())
      AND (k.expires_at, k.actor_id, k.operation, k.idem_key) > (coalesce($2::timestamptz, '-infinity'), $3::text, $4::text, $5::text)
    ORDER BY k.expires_at, k.actor_id, k.operation, k.idem_key
    LIMIT $6::integer
    FOR UPDATE OF k SKIP LOCKED
), abandoned AS (
    SELECT k.actor_id, k.operation, k.idem_key, k.expires_at
    FROM %1$s k
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
    DELETE FROM %1$s
    WHERE (actor_id, operation, idem_key) IN (SELECT actor_id, operation, idem_key FROM doomed)
    RETURNING 1
)
SELECT (SELECT count(*) FROM deleted) AS deleted, count(*) OVER () AS candidates,
       expires_at, actor_id, operation, idem_key
FROM doomed
ORDER BY expires_at DESC, actor_id DESC, operation DESC, idem_key DESC
LIMIT 1
$q$, idempotency_keys)
    USING at, after, after_actor, after_operation, after_key, batch;
END
$fn$;
