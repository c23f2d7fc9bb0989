-- outbox_accepted.sql: reconcile a delivery (a submission or a cancel) the
-- review desk says it accepted: any delivery not yet submitted is, and the mark of a dispatcher
-- still holding it then matches nothing.
--
-- Parameters:
--   $1 now                 the test clock; NULL for the database clock
--   $2 provider_reference  the desk's reference
--   $3 request_id          the delivery: its request,
--   $4 kind                its kind (a submission or a cancel),
--   $5 seq                 and which of its kind
WITH clock AS (
    SELECT coalesce($1::timestamptz, now()) AS now
)
UPDATE outbox o SET state = 'submitted', provider_reference = $2, next_attempt_at = NULL,
    lease_token = NULL, last_error = NULL, updated_at = clock.now
FROM clock
WHERE o.request_id = $3::uuid AND o.kind = $4::outbox_kind AND o.seq = $5::integer AND o.state NOT IN ('submitted', 'withdrawn')
