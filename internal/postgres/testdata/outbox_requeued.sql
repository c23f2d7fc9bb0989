WITH clock AS (
    SELECT coalesce(CAST(:now AS timestamptz), now()) AS now
)
UPDATE outbox o SET state = 'pending', attempts = 0, next_attempt_at = clock.now, lease_token = NULL,
    last_error = 'reconciled, the review desk never accepted it, so it is queued again', updated_at = clock.now
FROM clock
WHERE o.request_id = CAST(:id AS uuid) AND o.state = 'unknown'
