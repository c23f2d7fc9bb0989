-- count_keys_needing_attention.sql: how many keys need attention: held in
-- progress with a lease no owner's work sets (idempotency.NeedsAttentionLease),
-- so only an operator lets them go. Read through the index of the claims in
-- progress.
--
-- Parameters:
--   $1 now       the test clock; NULL for the database clock
--   $2 beyond_us a lease that ends further off than this, in microseconds, needs attention
SELECT count(*)
FROM idempotency_keys
WHERE lease_until IS NOT NULL
  AND lease_until > coalesce($1::timestamptz, now()) + $2::bigint * interval '1 microsecond'
