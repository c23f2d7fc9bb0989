-- outbox_accepted.sql: a delivery the review desk says it accepted is
-- submitted (unless withdrawn), with the desk's reference; a dispatcher still
-- holding it then matches nothing. $1 now, $2 provider_reference; the delivery: $3 request_id,
-- $4 kind, $5 seq.
WITH clock AS (
    SELECT coalesce($1::timestamptz, now()) AS now
)
UPDATE outbox o SET state = 'submitted', provider_reference = $2, next_attempt_at = NULL,
    lease_token = NULL, last_error = NULL, updated_at = clock.now
FROM clock
WHERE o.request_id = $3::uuid AND o.kind = $4 AND o.seq = $5::integer AND o.state NOT IN ('submitted', 'withdrawn')
