-- purge_expired_keys_on_shard.sql: the scan of sql/purge_expired_keys.sql
-- on the shard that holds the rows of $1 shard_actor
-- (migrations/citus/scans.sql), with its parameters after: $2 now,
-- $3 expires_at, $4 actor_id, $5 operation, $6 idem_key (the mark), $7 batch.
SELECT * FROM purge_expired_keys_on_shard($1, $2, $3, $4, $5, $6, $7)
