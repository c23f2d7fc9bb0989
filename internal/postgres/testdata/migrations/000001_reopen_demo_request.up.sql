-- reopen_demo_request: a third operation, as docs/operations.md's "A second
-- operation" adds one (TestAThirdOperationsEventsReachTheDeskInOrder): the
-- reopen, in one phase or as a claim's finish: the key written with its
-- answer (write_key) and, only where it was, the cancelled request
-- accepted again and the desk told as far as it heard of the cancel: its
-- withdrawn submission put back, or a reopen event queued, the seq-th
-- reopen of the request, after its other events (position)
-- (TestAReopenPutsAWithdrawnSubmissionBack).
CREATE FUNCTION reopen_demo_request(at timestamptz, actor text, op text, scope_key text, token uuid, finish boolean,
    fp text, ttl_us bigint, status integer, body bytea, headers jsonb, result text, request_id uuid)
RETURNS key_write
LANGUAGE plpgsql AS $$
DECLARE
    k key_write := write_key(at, actor, op, scope_key, token, finish, fp, NULL, ttl_us, status, body, headers, result);
    next_seq integer;
    next_position integer;
BEGIN
    IF NOT k.wrote THEN
        RETURN k;
    END IF;
    UPDATE demo_requests r SET state = 'accepted', cancelled_at = NULL
    WHERE r.id = request_id AND r.actor_id = actor AND r.state = 'cancelled';
    IF NOT FOUND THEN -- changed since the work read it: nothing commits, the work decides again
        RAISE EXCEPTION 'the demo request changed since it was read' USING ERRCODE = 'serialization_failure';
    END IF;
    k.effect := 1;
    -- The rule between a reverse transition and a withdrawn submission: the
    -- desk hears only of what it holds. A submission the cancel withdrew
    -- never reached the desk; the reopen puts it back, due now, and the desk
    -- gets the request once, open.
    UPDATE outbox o SET state = 'pending', next_attempt_at = k.now, updated_at = k.now
    WHERE o.request_id = reopen_demo_request.request_id AND o.actor_id = actor
      AND o.kind = 'submit' AND o.state = 'withdrawn';
    -- Its own event only when the cancel it undoes queued one: the
    -- request's last event is that cancel.
    IF (SELECT e.kind FROM outbox e WHERE e.request_id = reopen_demo_request.request_id AND e.actor_id = actor
        ORDER BY e.position DESC LIMIT 1) IS DISTINCT FROM 'cancel' THEN
        RETURN k;
    END IF;
    SELECT 1 + coalesce(max(e.seq) FILTER (WHERE e.kind = 'reopen'), 0), 1 + max(e.position)
    INTO next_seq, next_position
    FROM outbox e WHERE e.request_id = reopen_demo_request.request_id AND e.actor_id = actor;
    INSERT INTO outbox (request_id, actor_id, kind, seq, position, next_attempt_at, created_at, updated_at)
    VALUES (reopen_demo_request.request_id, actor, 'reopen', next_seq, next_position, k.now, k.now, k.now);
    RETURN k;
END
$$;
