WITH clock AS (
    SELECT coalesce(CAST(:now AS timestamptz), now()) AS now
), async_commit AS (
    SELECT set_config('synchronous_commit', 'off', true)
), mark AS (
    SELECT * FROM unnest(CAST(:ids AS uuid[]), CAST(:states AS delivery_state[]), CAST(:refs AS text[]),
                         CAST(:errors AS text[]), CAST(:retry_us AS bigint[]))
        AS m(request_id, state, reference, error, retry_us)
)
UPDATE outbox o SET state = mark.state, provider_reference = nullif(mark.reference, ''),
    last_error = nullif(mark.error, ''), lease_token = NULL, updated_at = clock.now,
    next_attempt_at = CASE WHEN mark.state = 'pending'
                           THEN clock.now + mark.retry_us * interval '1 microsecond' END
FROM mark, clock, async_commit
WHERE o.request_id = mark.request_id AND o.lease_token = CAST(:token AS uuid) AND o.state = 'pending'
