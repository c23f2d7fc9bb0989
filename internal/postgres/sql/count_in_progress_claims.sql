-- count_in_progress_claims.sql: how many claims are in progress, the claim
-- time of the oldest (NULL when there is none), and the store's time.
--
-- Parameters:
--   $1 now  the test clock; NULL for the database clock
SELECT count(*) AS n, min(created_at) AS oldest, coalesce($1::timestamptz, now()) AS now
FROM idempotency_keys WHERE lease_until IS NOT NULL -- in progress, by the table's CHECK
