-- count_in_progress_claims.sql: the claims in progress, the oldest claim's
-- time, and $1 now.
SELECT count(*) AS n, min(created_at) AS oldest, coalesce($1::timestamptz, now()) AS now
FROM idempotency_keys WHERE lease_until IS NOT NULL -- in progress, by the table's CHECK
