-- outbox_settle.sql: record the marks of deliveries still leased to the token
-- they were taken under; mark i is the i-th element of each array, and a row
-- another dispatcher took since is not matched. It commits without waiting
-- for its WAL flush: a mark a crash loses leaves the row taken, due again when
-- its lease passes, and that attempt asks the desk first, as after any crash.
--
-- A submission is withdrawn only while its request is still cancelled: a
-- reopen since the take (a service's reverse transition) finds it pending,
-- puts nothing back and queues its event after the cancel, so here the
-- submission stays pending, due now, and the desk gets the request before
-- its cancel and reopen (a withdrawn mark carries no retry: it is due at
-- once). cancelled locks the requests of the withdrawals
-- (FOR SHARE), so that a reopen either commits first and is seen, or waits
-- for this mark and then finds the submission withdrawn.
--
-- Parameters: $1 now (NULL: the database clock); per delivery: $2 request_ids,
-- $3 kinds, $4 seqs, $5 states, $6 references ('' for none), $7 errors ('' for
-- none), $8 retry_us (when a pending one is tried again), $9 lease_tokens.
WITH clock AS (
    SELECT coalesce($1::timestamptz, now()) AS now
), async_commit AS (
    SELECT set_config('synchronous_commit', 'off', true)
), given AS (
    SELECT * FROM unnest($2::uuid[], $3::text[], $4::integer[], $5::delivery_state[], $6::text[], $7::text[], $8::bigint[], $9::uuid[])
        AS m(request_id, kind, seq, state, reference, error, retry_us, lease_token)
), cancelled AS (
    SELECT r.id FROM demo_requests r
    WHERE r.id IN (SELECT request_id FROM given WHERE state = 'withdrawn') AND r.state = 'cancelled'
    FOR SHARE OF r
), mark AS (
    SELECT g.request_id, g.kind, g.seq, g.reference, g.error, g.retry_us, g.lease_token,
        CASE WHEN g.state = 'withdrawn' AND g.request_id NOT IN (SELECT id FROM cancelled) THEN 'pending' ELSE g.state END AS state
    FROM given g
)
UPDATE outbox o SET state = mark.state, provider_reference = nullif(mark.reference, ''),
    last_error = nullif(mark.error, ''), lease_token = NULL, updated_at = clock.now,
    next_attempt_at = CASE WHEN mark.state = 'pending'
                           THEN clock.now + mark.retry_us * interval '1 microsecond' END
FROM mark, clock, async_commit
WHERE o.request_id = mark.request_id AND o.kind = mark.kind AND o.seq = mark.seq AND o.lease_token = mark.lease_token AND o.state = 'pending'
