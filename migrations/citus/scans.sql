-- scans.sql: on a Citus coordinator, after distribute.sql: the scans, the
-- statements that read across actors (the dispatcher's take, its marks, the
-- sweeper's purge), each for one shard. Citus runs FOR UPDATE only in a
-- statement on one shard, so the store on Citus (internal/postgres/citus.go)
-- calls each function once per shard, with an actor whose rows the shard
-- holds. Each function is distributed by that argument and co-located with
-- the keys, so Citus delegates its call to the worker that holds the shard,
-- and there it runs its statement on the shard's own tables, which
-- shard_name() names (as run_command_on_shards does): plain PostgreSQL, where
-- SKIP LOCKED and the leases do their job within the shard as in one
-- database. Each is the statement of the same name in internal/postgres/sql,
-- whose comment says what it does and why; the store's shared scenarios run
-- both.

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
LANGUAGE plpgsql SET search_path FROM CURRENT AS $fn$
BEGIN
    RETURN QUERY EXECUTE format($q$
        WITH due AS (
            SELECT o.request_id, o.kind, o.seq
            FROM %1$s o
            WHERE o.next_attempt_at <= $1 AND o.actor_id <> ALL ($2)
              AND NOT EXISTS (SELECT 1 FROM %1$s e
                              WHERE e.request_id = o.request_id AND e.actor_id = o.actor_id
                                AND e.position < o.position AND e.state = 'pending')
            ORDER BY o.next_attempt_at
            LIMIT $3
            FOR UPDATE OF o SKIP LOCKED
        ), taken AS (
            UPDATE %1$s o SET attempts = o.attempts + 1, lease_token = $4,
                next_attempt_at = $1 + $5 * interval '1 microsecond', updated_at = $1
            FROM due
            WHERE o.request_id = due.request_id AND o.kind = due.kind AND o.seq = due.seq
            RETURNING o.request_id, o.actor_id, o.kind, o.seq, o.attempts
        )
        SELECT taken.request_id, r.actor_id, taken.kind, taken.seq, taken.attempts, r.topic, r.note, r.state = 'cancelled'
        FROM taken JOIN %2$s r ON r.id = taken.request_id AND r.actor_id = taken.actor_id
        $q$, shard_of('outbox', shard_actor), shard_of('demo_requests', shard_actor))
    USING coalesce(at, now()), busy, batch, lease_token, lease_us;
END
$fn$;

-- It returns how many rows it changed.
CREATE OR REPLACE FUNCTION outbox_settle_on_shard(shard_actor text, at timestamptz, request_ids uuid[], kinds text[],
    seqs integer[], states delivery_state[], refs text[], errors text[], retry_us bigint[], lease_tokens uuid[])
RETURNS bigint
LANGUAGE plpgsql SET search_path FROM CURRENT AS $fn$
DECLARE
    n bigint;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    EXECUTE format($q$
        WITH given AS (
            SELECT * FROM unnest($2, $3, $4, $5, $6, $7, $8, $9)
                AS g(request_id, kind, seq, state, reference, error, retry_us, lease_token)
        ), cancelled AS (
            SELECT r.id FROM %2$s r
            WHERE r.id IN (SELECT request_id FROM given WHERE state = 'withdrawn') AND r.state = 'cancelled'
            FOR SHARE OF r
        ), m AS (
            SELECT g.request_id, g.kind, g.seq, g.reference, g.error, g.retry_us, g.lease_token,
                CASE WHEN g.state = 'withdrawn' AND g.request_id NOT IN (SELECT id FROM cancelled) THEN 'pending' ELSE g.state END AS state
            FROM given g
        )
        UPDATE %1$s o SET state = m.state, provider_reference = nullif(m.reference, ''),
            last_error = nullif(m.error, ''), lease_token = NULL, updated_at = $1,
            next_attempt_at = CASE WHEN m.state = 'pending' THEN $1 + m.retry_us * interval '1 microsecond' END
        FROM m
        WHERE o.request_id = m.request_id AND o.kind = m.kind AND o.seq = m.seq AND o.lease_token = m.lease_token
          AND o.state = 'pending'
        $q$, shard_of('outbox', shard_actor), shard_of('demo_requests', shard_actor))
    USING coalesce(at, now()), request_ids, kinds, seqs, states, refs, errors, retry_us, lease_tokens;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$fn$;

CREATE OR REPLACE FUNCTION purge_expired_keys_on_shard(shard_actor text, at timestamptz, after timestamptz,
    after_actor text, after_operation text, after_key text, batch integer)
RETURNS TABLE (deleted bigint, candidates bigint, expires_at timestamptz, actor_id text, operation text, idem_key text)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $fn$
BEGIN
    RETURN QUERY EXECUTE format($q$
        WITH completed AS (
            SELECT k.actor_id, k.operation, k.idem_key, k.expires_at
            FROM %1$s k
            WHERE k.lease_until IS NULL AND k.expires_at <= $1
              AND (k.expires_at, k.actor_id, k.operation, k.idem_key) > ($2, $3, $4, $5)
            ORDER BY k.expires_at, k.actor_id, k.operation, k.idem_key
            LIMIT $6
            FOR UPDATE OF k SKIP LOCKED
        ), abandoned AS (
            SELECT k.actor_id, k.operation, k.idem_key, k.expires_at
            FROM %1$s k
            WHERE k.lease_until IS NOT NULL AND k.lease_until <= $1 AND k.expires_at <= $1
              AND (k.expires_at, k.actor_id, k.operation, k.idem_key) > ($2, $3, $4, $5)
            ORDER BY k.expires_at, k.actor_id, k.operation, k.idem_key
            LIMIT $6
            FOR UPDATE OF k SKIP LOCKED
        ), doomed AS (
            SELECT * FROM completed UNION ALL SELECT * FROM abandoned
            ORDER BY expires_at, actor_id, operation, idem_key
            LIMIT $6
        ), gone AS (
            DELETE FROM %1$s k USING doomed
            WHERE (k.actor_id, k.operation, k.idem_key) = (doomed.actor_id, doomed.operation, doomed.idem_key)
            RETURNING 1
        )
        SELECT (SELECT count(*) FROM gone), count(*) OVER (), expires_at, actor_id, operation, idem_key
        FROM doomed
        ORDER BY expires_at DESC, actor_id DESC, operation DESC, idem_key DESC
        LIMIT 1
        $q$, shard_of('idempotency_keys', shard_actor))
    USING coalesce(at, now()), coalesce(after, '-infinity'), after_actor, after_operation, after_key, batch;
END
$fn$;

-- shard_of runs on the workers; each scan's call is delegated to the worker of shard_actor's shard.
SELECT create_distributed_function('shard_of(regclass, text)');
SELECT create_distributed_function('outbox_take_due_on_shard(text, timestamptz, text[], integer, uuid, bigint)',
    '$1', colocate_with => 'idempotency_keys');
SELECT create_distributed_function('outbox_settle_on_shard(text, timestamptz, uuid[], text[], integer[], delivery_state[], text[], text[], bigint[], uuid[])',
    '$1', colocate_with => 'idempotency_keys');
SELECT create_distributed_function('purge_expired_keys_on_shard(text, timestamptz, timestamptz, text, text, text, integer)',
    '$1', colocate_with => 'idempotency_keys');
