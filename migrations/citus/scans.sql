-- scans.sql: on a Citus coordinator, after distribute.sql: the statements
-- that read across actors with FOR UPDATE SKIP LOCKED (the dispatcher's
-- take, the sweeper's purge) or write rows named by their request alone
-- (the dispatcher's marks), run one shard at a time. Citus runs FOR UPDATE
-- only in a statement on one shard, and refuses now() in a COALESCE or
-- CASE of an UPDATE.
--
-- The store calls each function once per shard, with an actor whose rows
-- are on that shard (shard_actor) and the statement's text as the store
-- runs it on one PostgreSQL (internal/postgres/sql), then its parameters.
-- Citus delegates the call to the worker that holds the shard, and there the
-- function runs that text against the shard's own tables: plain PostgreSQL,
-- so SKIP LOCKED and the leases do their job within the shard as they do in
-- one database.

-- on_shard: stmt with each distributed table named by its shard that holds
-- shard_actor's rows (on the worker, a table of its own). Comments that
-- name a table change too, harmlessly.
CREATE OR REPLACE FUNCTION on_shard(stmt text, shard_actor text)
RETURNS text
LANGUAGE plpgsql STABLE SET search_path FROM CURRENT AS $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['idempotency_keys', 'demo_requests', 'outbox'] LOOP
        stmt := regexp_replace(stmt, '\m' || t || '\M',
            shard_name(t::regclass, get_shard_id_for_distribution_column(t, shard_actor)), 'g');
    END LOOP;
    RETURN stmt;
END
$$;

-- The statements' stand-ins: the shard's actor, the statement, then the
-- parameters of its file, in order, and its columns (or, for a statement
-- that returns none, how many rows it changed).
CREATE OR REPLACE FUNCTION outbox_take_due(shard_actor text, stmt text, timestamptz, text[], integer, uuid, bigint)
RETURNS TABLE (request_id uuid, actor_id text, kind text, seq integer, attempts integer, topic text, note text, cancelled boolean)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    RETURN QUERY EXECUTE on_shard(stmt, shard_actor) USING $3, $4, $5, $6, $7;
END
$$;

CREATE OR REPLACE FUNCTION outbox_settle(shard_actor text, stmt text, timestamptz, uuid[], text[], integer[],
    delivery_state[], text[], text[], bigint[], uuid[])
RETURNS bigint
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    n bigint;
BEGIN
    EXECUTE on_shard(stmt, shard_actor) USING $3, $4, $5, $6, $7, $8, $9, $10, $11;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

CREATE OR REPLACE FUNCTION purge_expired_keys(shard_actor text, stmt text, timestamptz, timestamptz, text, text, text, integer)
RETURNS TABLE (deleted bigint, candidates bigint, expires_at timestamptz, actor_id text, operation text, idem_key text)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    RETURN QUERY EXECUTE on_shard(stmt, shard_actor) USING $3, $4, $5, $6, $7, $8;
END
$$;

-- Each call is delegated to the worker of shard_actor's shard.
SELECT create_distributed_function('outbox_take_due(text, text, timestamptz, text[], integer, uuid, bigint)', '$1', colocate_with => 'idempotency_keys');
SELECT create_distributed_function('outbox_settle(text, text, timestamptz, uuid[], text[], integer[], delivery_state[], text[], text[], bigint[], uuid[])', '$1', colocate_with => 'idempotency_keys');
SELECT create_distributed_function('purge_expired_keys(text, text, timestamptz, timestamptz, text, text, text, integer)', '$1', colocate_with => 'idempotency_keys');
