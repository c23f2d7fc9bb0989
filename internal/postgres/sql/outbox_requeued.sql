-- outbox_requeued.sql: a delivery the review desk says it never accepted: an
-- unknown one is queued again, due now, as never tried; a pending one is left
-- to its dispatcher, which asks before it sends. $1 now; the delivery:
-- $2 request_id, $3 kind, $4 seq.
WITH clock AS (
    SELECT coalesce($1::timestamptz, now()) AS now
)
UPDATE outbox o SET state = 'pending', attempts = 0, next_attempt_at = clock.now, lease_token = NULL,
    last_error = 'reconciled, the review desk never accepted it, so it is queued again', updated_at = clock.now
FROM clock
WHERE o.request_id = $2::uuid AND o.kind = $3 AND o.seq = $4::integer AND o.state = 'unknown'
