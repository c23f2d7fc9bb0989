-- count_in_progress_claims.sql: the claims in progress, those that need
-- attention (a lease further off than $2 beyond_us microseconds:
-- idempotency.NeedsAttentionLease), the oldest claim's time, and $1 now.
SELECT count(*) AS n,
       count(*) FILTER (WHERE lease_until > coalesce($1::timestamptz, now()) + $2::bigint * interval '1 microsecond') AS needs_attention,
       min(created_at) AS oldest, coalesce($1::timestamptz, now()) AS now
FROM idempotency_keys WHERE lease_until IS NOT NULL -- in progress, by the table's CHECK
