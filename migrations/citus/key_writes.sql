-- key_writes.sql: on a Citus coordinator, after distribute.sql: the key
-- writes as functions that Citus delegates to the worker holding the actor's
-- shard, each named after the statement it stands for there
-- (internal/postgres/sql), with its parameters and its columns. The store
-- calls them where they exist (postgres.Store), in one round trip.
--
-- Why not the statements themselves: Citus 14 routes no statement that
-- inserts in a CTE to one shard; it runs each such INSERT as a subplan of
-- its own, a round trip from the coordinator, and holds the key row's lock
-- across them. Here each statement is a router query on a local shard.
-- The statements' own comments say what the parts do and why; a function
-- does the same in the same order: prev read first, then the key row
-- written where idempotency.Decide takes it, then the business write,
-- only where the key was written. A change to a statement changes its
-- function too: make test-citus runs the store's scenarios against them.
-- Each function resolves the tables in the search_path of the migrate that
-- made it (SET search_path FROM CURRENT).

-- write_key: prev, the scope's row before the write; then the row given
-- written where the key is free or may be taken over (the statements'
-- claimed or finished), and whether it was.
CREATE OR REPLACE FUNCTION write_key(actor text, op text, scope_key text, fp text, token uuid,
    st key_state, lease timestamptz, status integer, body bytea, headers jsonb, result text,
    created timestamptz, completed timestamptz, expires timestamptz,
    OUT wrote boolean, OUT prev idempotency_keys)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    SELECT k.* INTO prev FROM idempotency_keys k
    WHERE k.actor_id = actor AND k.operation = op AND k.idem_key = scope_key;
    INSERT INTO idempotency_keys AS k (actor_id, operation, idem_key,
        fingerprint, state, claim_token, lease_until, status_code, response_body,
        response_headers, result_id, created_at, completed_at, expires_at)
    VALUES (actor, op, scope_key, fp, st, token, lease, status, body, headers, result,
        created, completed, expires)
    ON CONFLICT (actor_id, operation, idem_key) DO UPDATE SET
        (fingerprint, state, claim_token, lease_until, status_code, response_body,
         response_headers, result_id, created_at, completed_at, expires_at)
      = (excluded.fingerprint, excluded.state, excluded.claim_token, excluded.lease_until,
         excluded.status_code, excluded.response_body, excluded.response_headers,
         excluded.result_id, excluded.created_at, excluded.completed_at, excluded.expires_at)
    WHERE (k.state = 'completed' AND k.expires_at <= excluded.created_at)
       OR (k.state = 'in_progress' AND k.lease_until <= excluded.created_at AND k.fingerprint = excluded.fingerprint);
    wrote := FOUND;
END
$$;

-- finish_key: the claim of token completed with its answer, while it holds
-- the key in progress (the finish statements' finished), and whether it was.
CREATE OR REPLACE FUNCTION finish_key(t timestamptz, actor text, op text, scope_key text, token uuid,
    status integer, body bytea, headers jsonb, result text)
RETURNS boolean
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    UPDATE idempotency_keys k SET state = 'completed', lease_until = NULL,
        status_code = status, response_body = body, response_headers = headers, result_id = result,
        completed_at = t, expires_at = ((t AT TIME ZONE 'UTC') + (k.expires_at - k.created_at)) AT TIME ZONE 'UTC'
    WHERE k.actor_id = actor AND k.operation = op AND k.idem_key = scope_key
      AND k.claim_token = token AND k.state = 'in_progress';
    RETURN FOUND;
END
$$;

-- create_request: the demo request $2 id and its outbox row, due at once.
CREATE OR REPLACE FUNCTION create_request(actor text, id uuid, st text, topic text, note text, created timestamptz)
RETURNS integer
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO demo_requests (id, actor_id, state, topic, note, created_at)
    VALUES (create_request.id, actor, st, create_request.topic, create_request.note, created);
    INSERT INTO outbox (request_id, actor_id, next_attempt_at, created_at, updated_at)
    VALUES (create_request.id, actor, created, created, created);
    RETURN 1;
END
$$;

-- cancel_request: the request cancelled while accepted, its delivery
-- stopped or a cancel queued for the desk (cancel_demo_request.sql's
-- effect, stopped and desk_cancel). It returns how many requests changed.
CREATE OR REPLACE FUNCTION cancel_request(t timestamptz, actor text, st text, cancelled timestamptz, id uuid)
RETURNS integer
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    stopped delivery_state;
    next_seq integer;
    next_position integer;
    live boolean;
BEGIN
    UPDATE demo_requests r SET state = st, cancelled_at = cancelled
    WHERE r.id = cancel_request.id AND r.actor_id = actor AND r.state = 'accepted';
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    UPDATE outbox o SET state = CASE WHEN o.attempts = 0 THEN 'withdrawn' ELSE o.state END,
        next_attempt_at = CASE WHEN o.attempts = 0 THEN NULL ELSE t END,
        last_error = CASE WHEN o.attempts = 0 THEN NULL ELSE o.last_error END,
        updated_at = t
    WHERE o.request_id = cancel_request.id AND o.actor_id = actor AND o.kind = 'submit' AND o.state = 'pending'
      AND (o.attempts = 0 OR o.lease_token IS NULL)
    RETURNING o.state INTO stopped;
    IF stopped IS DISTINCT FROM 'withdrawn' THEN
        -- Read first, then inserted with VALUES: with forced delegation,
        -- Citus refuses an INSERT ... SELECT whose subqueries read the table.
        SELECT 1 + coalesce(max(e.seq) FILTER (WHERE e.kind = 'cancel'), 0), 1 + max(e.position),
               coalesce(bool_or(e.kind = 'submit' AND e.state NOT IN ('failed', 'withdrawn')), false)
        INTO next_seq, next_position, live
        FROM outbox e WHERE e.request_id = cancel_request.id AND e.actor_id = actor;
        IF live THEN
            INSERT INTO outbox (request_id, actor_id, kind, seq, position, next_attempt_at, created_at, updated_at)
            VALUES (cancel_request.id, actor, 'cancel', next_seq, next_position, t, t, t);
        END IF;
    END IF;
    RETURN 1;
END
$$;

-- The statements' stand-ins: the parameters of their files, in order, and
-- their columns.
CREATE OR REPLACE FUNCTION claim(timestamptz, text, text, text, text, uuid, bigint, bigint)
RETURNS TABLE (now timestamptz, wrote boolean, effect bigint, fingerprint text, state key_state, lease_until timestamptz,
    status_code integer, response_body bytea, response_headers jsonb, result_id text, created_at timestamptz,
    completed_at timestamptz, expires_at timestamptz)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    t timestamptz := coalesce($1, pg_catalog.now());
    w record;
    n bigint := 0;
BEGIN
    -- a claim commits without waiting for its WAL flush (claim.sql)
    PERFORM set_config('synchronous_commit', 'off', true);
    w := write_key($2, $3, $4, $5, $6, 'in_progress', t + $7 * interval '1 microsecond', NULL, NULL, NULL, NULL,
        t, NULL, t + $8 * interval '1 microsecond');
    RETURN QUERY SELECT t, w.wrote, n, (w.prev).fingerprint, (w.prev).state, (w.prev).lease_until, (w.prev).status_code,
        (w.prev).response_body, (w.prev).response_headers, (w.prev).result_id, (w.prev).created_at,
        (w.prev).completed_at, (w.prev).expires_at;
END
$$;

CREATE OR REPLACE FUNCTION answer_only(timestamptz, text, text, text, text, uuid, integer, bytea, jsonb, text, bigint)
RETURNS TABLE (now timestamptz, wrote boolean, effect bigint, fingerprint text, state key_state, lease_until timestamptz,
    status_code integer, response_body bytea, response_headers jsonb, result_id text, created_at timestamptz,
    completed_at timestamptz, expires_at timestamptz)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    t timestamptz := coalesce($1, pg_catalog.now());
    w record;
    n bigint := 0;
BEGIN
    w := write_key($2, $3, $4, $5, $6, 'completed', NULL, $7, $8, $9, $10,
        t, t, t + $11 * interval '1 microsecond');
    RETURN QUERY SELECT t, w.wrote, n, (w.prev).fingerprint, (w.prev).state, (w.prev).lease_until, (w.prev).status_code,
        (w.prev).response_body, (w.prev).response_headers, (w.prev).result_id, (w.prev).created_at,
        (w.prev).completed_at, (w.prev).expires_at;
END
$$;

CREATE OR REPLACE FUNCTION create_demo_request(timestamptz, text, text, text, text, uuid, integer, bytea, jsonb, text, bigint, uuid, text, text, text, timestamptz)
RETURNS TABLE (now timestamptz, wrote boolean, effect bigint, fingerprint text, state key_state, lease_until timestamptz,
    status_code integer, response_body bytea, response_headers jsonb, result_id text, created_at timestamptz,
    completed_at timestamptz, expires_at timestamptz)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    t timestamptz := coalesce($1, pg_catalog.now());
    w record;
    n bigint := 0;
BEGIN
    w := write_key($2, $3, $4, $5, $6, 'completed', NULL, $7, $8, $9, $10,
        t, t, t + $11 * interval '1 microsecond');
    IF w.wrote THEN
        n := create_request($2, $12, $13, $14, $15, $16);
    END IF;
    RETURN QUERY SELECT t, w.wrote, n, (w.prev).fingerprint, (w.prev).state, (w.prev).lease_until, (w.prev).status_code,
        (w.prev).response_body, (w.prev).response_headers, (w.prev).result_id, (w.prev).created_at,
        (w.prev).completed_at, (w.prev).expires_at;
END
$$;

CREATE OR REPLACE FUNCTION cancel_demo_request(timestamptz, text, text, text, text, uuid, integer, bytea, jsonb, text, bigint, text, timestamptz, uuid)
RETURNS TABLE (now timestamptz, wrote boolean, effect bigint, fingerprint text, state key_state, lease_until timestamptz,
    status_code integer, response_body bytea, response_headers jsonb, result_id text, created_at timestamptz,
    completed_at timestamptz, expires_at timestamptz)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    t timestamptz := coalesce($1, pg_catalog.now());
    w record;
    n bigint := 0;
BEGIN
    w := write_key($2, $3, $4, $5, $6, 'completed', NULL, $7, $8, $9, $10,
        t, t, t + $11 * interval '1 microsecond');
    IF w.wrote THEN
        n := cancel_request(t, $2, $12, $13, $14);
    END IF;
    RETURN QUERY SELECT t, w.wrote, n, (w.prev).fingerprint, (w.prev).state, (w.prev).lease_until, (w.prev).status_code,
        (w.prev).response_body, (w.prev).response_headers, (w.prev).result_id, (w.prev).created_at,
        (w.prev).completed_at, (w.prev).expires_at;
END
$$;

CREATE OR REPLACE FUNCTION finish_claim_answer_only(timestamptz, integer, bytea, jsonb, text, text, text, text, uuid)
RETURNS TABLE (wrote boolean, effect integer)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    t timestamptz := coalesce($1, pg_catalog.now());
BEGIN
    wrote := finish_key(t, $6, $7, $8, $9, $2, $3, $4, $5);
    effect := 0;
    RETURN NEXT;
END
$$;

CREATE OR REPLACE FUNCTION finish_claim_create_demo_request(timestamptz, integer, bytea, jsonb, text, text, text, text, uuid, uuid, text, text, text, timestamptz)
RETURNS TABLE (wrote boolean, effect integer)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    t timestamptz := coalesce($1, pg_catalog.now());
BEGIN
    wrote := finish_key(t, $6, $7, $8, $9, $2, $3, $4, $5);
    effect := CASE WHEN wrote THEN create_request($6, $10, $11, $12, $13, $14) ELSE 0 END;
    RETURN NEXT;
END
$$;

CREATE OR REPLACE FUNCTION finish_claim_cancel_demo_request(timestamptz, integer, bytea, jsonb, text, text, text, text, uuid, text, timestamptz, uuid)
RETURNS TABLE (wrote boolean, effect integer)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    t timestamptz := coalesce($1, pg_catalog.now());
BEGIN
    wrote := finish_key(t, $6, $7, $8, $9, $2, $3, $4, $5);
    effect := CASE WHEN wrote THEN cancel_request(t, $6, $10, $11, $12) ELSE 0 END;
    RETURN NEXT;
END
$$;

-- Citus makes every function on every node as it is created; the stand-ins
-- are delegated to the worker of the actor's shard ($2, the finish's $6),
-- also inside a transaction (a conditional effect's, which holds nothing
-- else).
SELECT create_distributed_function('claim(timestamptz, text, text, text, text, uuid, bigint, bigint)', '$2', colocate_with => 'idempotency_keys', force_delegation => true);
SELECT create_distributed_function('answer_only(timestamptz, text, text, text, text, uuid, integer, bytea, jsonb, text, bigint)', '$2', colocate_with => 'idempotency_keys', force_delegation => true);
SELECT create_distributed_function('create_demo_request(timestamptz, text, text, text, text, uuid, integer, bytea, jsonb, text, bigint, uuid, text, text, text, timestamptz)', '$2', colocate_with => 'idempotency_keys', force_delegation => true);
SELECT create_distributed_function('cancel_demo_request(timestamptz, text, text, text, text, uuid, integer, bytea, jsonb, text, bigint, text, timestamptz, uuid)', '$2', colocate_with => 'idempotency_keys', force_delegation => true);
SELECT create_distributed_function('finish_claim_answer_only(timestamptz, integer, bytea, jsonb, text, text, text, text, uuid)', '$6', colocate_with => 'idempotency_keys', force_delegation => true);
SELECT create_distributed_function('finish_claim_create_demo_request(timestamptz, integer, bytea, jsonb, text, text, text, text, uuid, uuid, text, text, text, timestamptz)', '$6', colocate_with => 'idempotency_keys', force_delegation => true);
SELECT create_distributed_function('finish_claim_cancel_demo_request(timestamptz, integer, bytea, jsonb, text, text, text, text, uuid, text, timestamptz, uuid)', '$6', colocate_with => 'idempotency_keys', force_delegation => true);
