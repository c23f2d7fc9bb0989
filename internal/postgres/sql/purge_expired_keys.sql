-- purge_expired_keys.sql: delete up to $6 batch expired key rows, first to
-- expire first, after the row where the sweep's last batch ended ($2
-- expires_at, $3 actor_id, $4 operation, $5 idem_key; $2 NULL: from the
-- start); $1 now: the test clock, NULL for the database clock. It returns
-- how many it deleted, how many it picked and the last of them. The
-- function purge_expired_keys (migrations/000005_scans.up.sql) is the
-- statement, which takes the table it reads: here idempotency_keys; on
-- Citus, a shard's.
SELECT * FROM purge_expired_keys('idempotency_keys', $1, $2, $3, $4, $5, $6)
