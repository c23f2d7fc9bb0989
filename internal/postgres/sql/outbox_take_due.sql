-- outbox_take_due.sql: take up to a batch of due deliveries, oldest due first,
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
--
-- Parameters: $1 now (NULL: the database clock), $2 busy (text[], may be
-- empty), $3 batch, $4 lease_token, $5 lease_us (the lease, in microseconds).
WITH clock AS (
    SELECT coalesce($1::timestamptz, now()) AS now
), due AS (
    SELECT o.request_id, o.kind, o.seq
    FROM outbox o
    WHERE o.next_attempt_at <= coalesce($1::timestamptz, now()) -- pending, by the table's CHECK
      AND o.actor_id <> ALL ($2::text[])
      AND NOT EXISTS (SELECT 1 FROM outbox e
                      WHERE e.request_id = o.request_id AND e.actor_id = o.actor_id
                        AND e.position < o.position AND e.state = 'pending')
    ORDER BY o.next_attempt_at
    LIMIT $3::integer
    FOR UPDATE OF o SKIP LOCKED
), taken AS (
    UPDATE outbox o SET attempts = o.attempts + 1, lease_token = $4::uuid,
        next_attempt_at = clock.now + $5::bigint * interval '1 microsecond',
        updated_at = clock.now
    FROM due, clock
    WHERE o.request_id = due.request_id AND o.kind = due.kind AND o.seq = due.seq
    RETURNING o.request_id, o.actor_id, o.kind, o.seq, o.attempts
)
SELECT taken.request_id, r.actor_id, taken.kind, taken.seq, taken.attempts, r.topic, r.note, r.state = 'cancelled' AS cancelled
FROM taken JOIN demo_requests r ON r.id = taken.request_id AND r.actor_id = taken.actor_id
