-- shard_ids.sql: the shards of idempotency_keys, in the order of their hash
-- ranges.
SELECT shardid FROM pg_dist_shard
WHERE logicalrelid = 'idempotency_keys'::regclass
ORDER BY shardminvalue::integer
