-- shards.sql: the shards of idempotency_keys (and so of the tables
-- co-located with it), in the order of their hash ranges, each with an
-- actor whose rows it holds: the first of '0', '1', '2', … that Citus puts
-- there. 64 tries a shard find one in each, a split's halves too; a shard
-- none fell in comes with a NULL actor.
WITH probe AS (
    SELECT g::text AS actor, get_shard_id_for_distribution_column('idempotency_keys', g::text) AS shardid
    FROM generate_series(0, 64 * (SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'idempotency_keys'::regclass)) g
)
SELECT DISTINCT ON (s.shardminvalue::integer) s.shardid, p.actor
FROM pg_dist_shard s LEFT JOIN probe p USING (shardid)
WHERE s.logicalrelid = 'idempotency_keys'::regclass
ORDER BY s.shardminvalue::integer, p.actor::integer
