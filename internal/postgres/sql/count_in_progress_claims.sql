-- count_in_progress_claims.sql: how many claims are in progress, how many
-- of them need attention (a lease further off than $2: no owner's work
-- sets one, idempotency.NeedsAttentionLease), the claim time of the oldest
-- (NULL when there is none), and the store's time.
--
-- Parameters:
--   $1 now        the test clock; NULL for the database clock
--   $2 beyond_us  a lease that ends further off than this, in microseconds, needs attention
SELECT count(*) AS n,
       count(*) FILTER (WHERE lease_until > coalesce($1::timestamptz, now()) + $2::bigint * interval '1 microsecond') AS needs_attention,
       min(created_at) AS oldest, coalesce($1::timestamptz, now()) AS now
FROM idempotency_keys WHERE lease_until IS NOT NULL -- in progress, by the table's CHECK
