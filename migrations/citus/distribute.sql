-- distribute.sql: on a Citus coordinator, once, after the migrations: the
-- key table, the business table and the outbox distributed by the actor and
-- co-located, so that an actor's key, request and outbox rows share a shard
-- and a request's statement goes to that shard alone. The three are a
-- co-location group of their own: a shard split or move takes them alone.
--
-- A distributed table's unique keys must hold its distribution column: the
-- business rows and the outbox gain the actor in theirs. On one PostgreSQL
-- they keep their keys (a uuid is unique alone, and the full demo's
-- expedites reference demo_requests (id)).
ALTER TABLE demo_requests DROP CONSTRAINT demo_requests_pkey, ADD PRIMARY KEY (id, actor_id);
ALTER TABLE outbox DROP CONSTRAINT outbox_pkey, ADD PRIMARY KEY (request_id, kind, seq, actor_id);
SELECT create_distributed_table('idempotency_keys', 'actor_id', colocate_with => 'none');
SELECT create_distributed_table('demo_requests', 'actor_id', colocate_with => 'idempotency_keys');
SELECT create_distributed_table('outbox', 'actor_id', colocate_with => 'idempotency_keys');
