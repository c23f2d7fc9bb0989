-- outbox_requeued.sql: reconcile a delivery (a submission or a cancel) the
-- review desk says it never accepted: an unknown one goes back in the queue, due now, as if never
-- tried (the desk just said so); a pending one is left to its dispatcher,
-- which asks before it sends.
--
-- Parameters:
--   $1 now         the test clock; NULL for the database clock
--   $2 request_id  the delivery: its request,
--   $3 kind        its kind (a submission or a cancel),
--   $4 seq         and which of its kind
WITH clock AS (
    SELECT coalesce($1::timestamptz, now()) AS now
)
UPDATE outbox o SET state = 'pending', attempts = 0, next_attempt_at = clock.now, lease_token = NULL,
    last_error = 'reconciled, the review desk never accepted it, so it is queued again', updated_at = clock.now
FROM clock
WHERE o.request_id = $2::uuid AND o.kind = $3::outbox_kind AND o.seq = $4::integer AND o.state = 'unknown'
