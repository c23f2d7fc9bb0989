WITH clock AS (
    SELECT coalesce(CAST(:now AS timestamptz), now()) AS now
)
UPDATE outbox o SET state = 'submitted', provider_reference = :reference, next_attempt_at = NULL,
    lease_token = NULL, last_error = NULL, updated_at = clock.now
FROM clock
WHERE o.request_id = CAST(:id AS uuid) AND o.state <> 'submitted'
