WITH clock AS (
    SELECT coalesce(CAST(:now AS timestamptz), now()) AS now
)
UPDATE outbox o SET updated_at = clock.now, lease_token = NULL,
    state = CASE WHEN :reference <> '' THEN 'submitted' ELSE 'pending' END,
    provider_reference = nullif(:reference, ''),
    next_attempt_at = CASE WHEN :reference <> '' THEN NULL ELSE clock.now END,
    attempts = CASE WHEN :reference <> '' THEN o.attempts ELSE 0 END,
    last_error = CASE WHEN :reference <> '' THEN NULL
                      ELSE 'reconciled, the review desk never accepted it, so it is queued again' END
FROM clock
WHERE o.request_id = CAST(:id AS uuid)
  AND (o.state = 'unknown' OR (:reference <> '' AND o.state <> 'submitted'))
