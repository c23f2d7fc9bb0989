-- scans.sql: on a Citus coordinator, after distribute.sql: the scans (the
-- dispatcher's take, its marks, the sweeper's purge) on one shard. Citus
-- runs FOR UPDATE only in a statement on one shard, so the store on Citus
-- (internal/postgres/citus.go) calls each function here once per shard,
-- with an actor whose rows the shard holds. Each is distributed by that
-- argument and co-located with the keys, so Citus delegates its call to the
-- worker that holds the shard, and there it runs the scan of one PostgreSQL
-- (migrations/000005_scans.up.sql) on the shard's own tables, which
-- shard_name() names (as run_command_on_shards does): plain PostgreSQL,
-- where SKIP LOCKED and the leases do their job within the shard as in one
-- database.

DROP FUNCTION IF EXISTS outbox_take_due(text, text, timestamptz, text[], integer, uuid, bigint),
    outbox_settle(text, text, timestamptz, uuid[], text[], integer[], delivery_state[], text[], text[], bigint[], uuid[]),
    purge_expired_keys(text, text, timestamptz, timestamptz, text, text, text, integer),
    on_shard(text, text);

-- The shard of the table tbl that holds shard_actor's rows.
CREATE OR REPLACE FUNCTION shard_of(tbl regclass, shard_actor text)
RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT shard_name(tbl, get_shard_id_for_distribution_column(tbl, shard_actor))
$$;

CREATE OR REPLACE FUNCTION outbox_take_due_on_shard(shard_actor text, at timestamptz, busy text[], batch integer,
    lease_token uuid, lease_us bigint)
RETURNS TABLE (request_id uuid, actor_id text, kind text, seq integer, attempts integer, topic text, note text, cancelled boolean)
LANGUAGE sql SET search_path FROM CURRENT AS $$
    SELECT * FROM outbox_take_due(shard_of('outbox', shard_actor)::regclass, shard_of('demo_requests', shard_actor)::regclass,
        at, busy, batch, lease_token, lease_us)
$$;

CREATE OR REPLACE FUNCTION outbox_settle_on_shard(shard_actor text, at timestamptz, request_ids uuid[], kinds text[],
    seqs integer[], states delivery_state[], refs text[], errors text[], retry_us bigint[], lease_tokens uuid[])
RETURNS bigint
LANGUAGE sql SET search_path FROM CURRENT AS $$
    SELECT outbox_settle(shard_of('outbox', shard_actor)::regclass, shard_of('demo_requests', shard_actor)::regclass,
        at, request_ids, kinds, seqs, states, refs, errors, retry_us, lease_tokens)
$$;

CREATE OR REPLACE FUNCTION purge_expired_keys_on_shard(shard_actor text, at timestamptz, after timestamptz,
    after_actor text, after_operation text, after_key text, batch integer)
RETURNS TABLE (deleted bigint, candidates bigint, expires_at timestamptz, actor_id text, operation text, idem_key text)
LANGUAGE sql SET search_path FROM CURRENT AS $$
    SELECT * FROM purge_expired_keys(shard_of('idempotency_keys', shard_actor)::regclass,
        at, after, after_actor, after_operation, after_key, batch)
$$;

-- shard_of and the scans run on the workers; each call on a shard is
-- delegated to the worker of shard_actor's shard.
SELECT create_distributed_function('shard_of(regclass, text)');
SELECT create_distributed_function('outbox_take_due(regclass, regclass, timestamptz, text[], integer, uuid, bigint)');
SELECT create_distributed_function('outbox_settle(regclass, regclass, timestamptz, uuid[], text[], integer[], delivery_state[], text[], text[], bigint[], uuid[])');
SELECT create_distributed_function('purge_expired_keys(regclass, timestamptz, timestamptz, text, text, text, integer)');
SELECT create_distributed_function('outbox_take_due_on_shard(text, timestamptz, text[], integer, uuid, bigint)',
    '$1', colocate_with => 'idempotency_keys');
SELECT create_distributed_function('outbox_settle_on_shard(text, timestamptz, uuid[], text[], integer[], delivery_state[], text[], text[], bigint[], uuid[])',
    '$1', colocate_with => 'idempotency_keys');
SELECT create_distributed_function('purge_expired_keys_on_shard(text, timestamptz, timestamptz, text, text, text, integer)',
    '$1', colocate_with => 'idempotency_keys');
