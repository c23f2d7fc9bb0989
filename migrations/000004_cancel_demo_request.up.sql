-- cancel_demo_request: the cancel, in one phase or as a claim's finish
-- (sql/cancel_demo_request.sql calls it): the key written with its answer
-- (write_key) and, only where it was, the request cancelled while accepted
-- and its delivery stopped. A request no longer as the work read it
-- (accepted) aborts the whole statement, the key's write with it.
CREATE FUNCTION cancel_demo_request(at timestamptz, actor text, op text, scope_key text, token uuid, finish boolean,
    fp text, ttl_us bigint, status integer, body bytea, headers jsonb, result text,
    request_state text, cancelled timestamptz, request_id uuid)
RETURNS key_write
LANGUAGE plpgsql AS $$
DECLARE
    k key_write := write_key(at, actor, op, scope_key, token, finish, fp, NULL, ttl_us, status, body, headers, result);
    stopped delivery_state;
    next_seq integer;
    next_position integer;
    live boolean;
BEGIN
    IF NOT k.wrote THEN
        RETURN k;
    END IF;
    UPDATE demo_requests r SET state = request_state, cancelled_at = cancelled
    WHERE r.id = request_id AND r.actor_id = actor AND r.state = 'accepted';
    IF NOT FOUND THEN -- changed since the work read it: nothing commits, the work decides again
        RAISE EXCEPTION 'the demo request changed since it was read' USING ERRCODE = 'serialization_failure';
    END IF;
    k.effect := 1;
    -- A delivery never tried cannot be at the desk: it is withdrawn. One tried
    -- and waiting (the desk was down, an answer was lost) is made due now: the
    -- dispatcher asks the desk whether an attempt got there and withdraws it
    -- if none did (package delivery). One a dispatcher holds (lease_token) is
    -- left to it: this UPDATE waits for the row lock a dispatcher takes it
    -- under (outbox_take_due.sql) and rechecks, so a row taken meanwhile is
    -- not withdrawn.
    UPDATE outbox o SET state = CASE WHEN o.attempts = 0 THEN 'withdrawn' ELSE o.state END,
        next_attempt_at = CASE WHEN o.attempts = 0 THEN NULL ELSE k.now END,
        last_error = CASE WHEN o.attempts = 0 THEN NULL ELSE o.last_error END,
        updated_at = k.now
    WHERE o.request_id = cancel_demo_request.request_id AND o.actor_id = actor AND o.kind = 'submit' AND o.state = 'pending'
      AND (o.attempts = 0 OR o.lease_token IS NULL)
    RETURNING o.state INTO stopped;
    IF stopped = 'withdrawn' THEN
        RETURN k;
    END IF;
    -- A delivery neither withdrawn nor refused (failed) may be at the desk:
    -- queue a keyed cancel, due now (the desk keeps a cancel that comes before
    -- its submission). seq numbers the request's cancels: one reopened and
    -- cancelled again gets a second; position places it after the request's
    -- other events. Two transitions of a request wait for each other on its
    -- row (the UPDATE above), and the later reads the events the earlier
    -- queued; the unique keys on seq and position refuse an event placed
    -- twice: nothing of it commits, and it is decided again
    -- (idempotency.ErrEffectNotApplied).
    SELECT 1 + coalesce(max(e.seq) FILTER (WHERE e.kind = 'cancel'), 0), 1 + max(e.position),
           coalesce(bool_or(e.kind = 'submit' AND e.state NOT IN ('failed', 'withdrawn')), false)
    INTO next_seq, next_position, live
    FROM outbox e WHERE e.request_id = cancel_demo_request.request_id AND e.actor_id = actor;
    IF live THEN
        INSERT INTO outbox (request_id, actor_id, kind, seq, position, next_attempt_at, created_at, updated_at)
        VALUES (cancel_demo_request.request_id, actor, 'cancel', next_seq, next_position, k.now, k.now, k.now);
    END IF;
    RETURN k;
END
$$;
