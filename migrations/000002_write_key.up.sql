-- write_key: the key row's part of every key write, written once: a claim
-- (claim.sql), and each operation's function, which calls it first and
-- writes its business rows only where it wrote, so that both commit or
-- neither. It returns key_write: the time it used (at, or the database
-- clock), whether it wrote, the row there before (prev; all NULL for none,
-- and for a finish), and effect, the rows an operation's business write
-- changed (0 here). The functions name their tables unqualified and carry
-- no search_path of their own: they run in the caller's. On Citus each
-- function that returns key_write is delegated to the worker of the
-- actor's shard, pinned to the schema it was made in (postgres.Distribute).
--
-- A claim or a one-phase answer writes the scope's row where the key is
-- free or idempotency.Decide takes it over: its answer expired, or its
-- owner's lease passed and the same intent asks again. The unique index
-- decides the race: the INSERT waits on it for an uncommitted writer of the
-- scope, and ON CONFLICT takes the row over only where its WHERE holds,
-- rechecked under the row's lock, so of two racing takeovers one wins. A
-- row committed after prev was read is not in it: wrote is false, and the
-- Runner runs the statement again. A lease makes the row a claim, owned by
-- token until it ends; no lease, the answer completed.
--
-- A finish completes the claim with its answer only while token holds it
-- in progress: a lost lease completes nothing. Its TTL counts from the
-- answer, added in UTC (timestamptz + interval is not immutable, and Citus
-- refuses it beside columns).
CREATE TYPE key_write AS (now timestamptz, wrote boolean,
    fingerprint text, state key_state, lease_until timestamptz, status_code integer, response_body bytea,
    response_headers jsonb, result_id text, created_at timestamptz, completed_at timestamptz, expires_at timestamptz,
    effect bigint);

CREATE FUNCTION write_key(at timestamptz, actor text, op text, scope_key text, token uuid, finish boolean,
    fp text, lease_us bigint, ttl_us bigint, status integer, body bytea, headers jsonb, result text)
RETURNS key_write
LANGUAGE plpgsql AS $$
DECLARE
    k key_write;
BEGIN
    k.now := coalesce(at, pg_catalog.now());
    k.effect := 0;
    IF finish THEN
        UPDATE idempotency_keys r SET state = 'completed', lease_until = NULL,
            status_code = status, response_body = body, response_headers = headers, result_id = result,
            completed_at = k.now,
            expires_at = ((k.now AT TIME ZONE 'UTC') + (r.expires_at - r.created_at)) AT TIME ZONE 'UTC'
        WHERE r.actor_id = actor AND r.operation = op AND r.idem_key = scope_key
          AND r.claim_token = token AND r.state = 'in_progress';
        k.wrote := FOUND;
        RETURN k;
    END IF;
    IF lease_us IS NOT NULL THEN
        -- A claim must be visible, not durable: its commit does not wait for its WAL
        -- flush. A crash may lose a claim, never a creation (the durable finish finds
        -- no row and creates nothing; the retry claims again).
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    -- A new key, the most frequent write, in one statement: nothing was
    -- there (a fast path: make bench shows it buys a tenth of a create).
    INSERT INTO idempotency_keys
    VALUES (actor, op, scope_key, fp, CASE WHEN lease_us IS NULL THEN 'completed' ELSE 'in_progress' END::key_state,
        token, k.now + lease_us * interval '1 microsecond', status, body, headers, result,
        k.now, CASE WHEN lease_us IS NULL THEN k.now END, k.now + ttl_us * interval '1 microsecond')
    ON CONFLICT (actor_id, operation, idem_key) DO NOTHING;
    IF FOUND THEN
        k.wrote := true;
        RETURN k;
    END IF;
    SELECT r.fingerprint, r.state, r.lease_until, r.status_code, r.response_body, r.response_headers,
           r.result_id, r.created_at, r.completed_at, r.expires_at
    INTO k.fingerprint, k.state, k.lease_until, k.status_code, k.response_body, k.response_headers,
         k.result_id, k.created_at, k.completed_at, k.expires_at
    FROM idempotency_keys r
    WHERE r.actor_id = actor AND r.operation = op AND r.idem_key = scope_key;
    -- A row the takeover below would leave as it is (the same test as its
    -- WHERE) is answered as read, a replay's usual case, without locking it.
    -- One that changes meanwhile only by its owner (a finish, a release) is
    -- answered as it was: in progress, and the Runner answers that.
    IF FOUND AND NOT ((k.state = 'completed' AND k.expires_at <= k.now)
        OR (k.state = 'in_progress' AND k.lease_until <= k.now AND k.fingerprint = fp)) THEN
        k.wrote := false;
        RETURN k;
    END IF;
    INSERT INTO idempotency_keys AS r
    VALUES (actor, op, scope_key, fp, CASE WHEN lease_us IS NULL THEN 'completed' ELSE 'in_progress' END::key_state,
        token, k.now + lease_us * interval '1 microsecond', status, body, headers, result,
        k.now, CASE WHEN lease_us IS NULL THEN k.now END, k.now + ttl_us * interval '1 microsecond')
    ON CONFLICT (actor_id, operation, idem_key) DO UPDATE SET
        (fingerprint, state, claim_token, lease_until, status_code, response_body,
         response_headers, result_id, created_at, completed_at, expires_at)
      = (excluded.fingerprint, excluded.state, excluded.claim_token, excluded.lease_until,
         excluded.status_code, excluded.response_body, excluded.response_headers,
         excluded.result_id, excluded.created_at, excluded.completed_at, excluded.expires_at)
    WHERE (r.state = 'completed' AND r.expires_at <= excluded.created_at)
       OR (r.state = 'in_progress' AND r.lease_until <= excluded.created_at AND r.fingerprint = excluded.fingerprint);
    k.wrote := FOUND;
    RETURN k;
END
$$;
