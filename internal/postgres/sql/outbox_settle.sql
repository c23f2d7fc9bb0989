-- outbox_settle.sql: record the marks of deliveries still leased to the
-- tokens they were taken under, in one statement: mark i is the i-th
-- element of each array. A row whose lease another dispatcher took is not
-- matched. It
-- commits without waiting for its WAL flush: a mark a crash loses leaves its
-- row taken, due again when the lease passes, and that attempt asks the desk
-- first, which is what it does after any crash.
--
-- Parameters:
--   $1 now          the test clock; NULL for the database clock
--   $2 request_ids  the deliveries (uuid[]),
--   $3 kinds        their kinds: submit or cancel (outbox_kind[]),
--   $4 seqs         and which of their kind (integer[])
--   $5 states       their new states (delivery_state[])
--   $6 references   the desk's references, '' for none (text[])
--   $7 errors       the errors, '' for none (text[])
--   $8 retry_us     for a pending one, when to try again, in microseconds (bigint[])
--   $9 lease_tokens the tokens they were taken under (uuid[])
WITH clock AS (
    SELECT coalesce($1::timestamptz, now()) AS now
), async_commit AS (
    SELECT set_config('synchronous_commit', 'off', true)
), mark AS (
    SELECT * FROM unnest($2::uuid[], $3::outbox_kind[], $4::integer[], $5::delivery_state[], $6::text[], $7::text[], $8::bigint[], $9::uuid[])
        AS m(request_id, kind, seq, state, reference, error, retry_us, lease_token)
)
UPDATE outbox o SET state = mark.state, provider_reference = nullif(mark.reference, ''),
    last_error = nullif(mark.error, ''), lease_token = NULL, updated_at = clock.now,
    next_attempt_at = CASE WHEN mark.state = 'pending'
                           THEN clock.now + mark.retry_us * interval '1 microsecond' END
FROM mark, clock, async_commit
WHERE o.request_id = mark.request_id AND o.kind = mark.kind AND o.seq = mark.seq AND o.lease_token = mark.lease_token AND o.state = 'pending'
