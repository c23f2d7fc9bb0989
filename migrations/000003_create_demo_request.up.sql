-- create_demo_request: the create of a demo request, in one phase or as a
-- claim's finish (sql/create_demo_request.sql calls it). One transaction,
-- one durable commit: the key written with its answer (write_key) and,
-- only where it was, the demo request and its outbox row, due at once (the
-- dispatcher calls the review desk, never the request).
CREATE FUNCTION create_demo_request(at timestamptz, actor text, op text, scope_key text, token uuid, finish boolean,
    fp text, ttl_us bigint, status integer, body bytea, headers jsonb, result text,
    request_id uuid, request_state text, topic text, note text, created timestamptz)
RETURNS key_write
LANGUAGE plpgsql AS $$
DECLARE
    k key_write := write_key(at, actor, op, scope_key, token, finish, fp, NULL, ttl_us, status, body, headers, result);
BEGIN
    IF k.wrote THEN
        INSERT INTO demo_requests (id, actor_id, state, topic, note, created_at)
        VALUES (request_id, actor, request_state, create_demo_request.topic, create_demo_request.note, created);
        INSERT INTO outbox (request_id, actor_id, next_attempt_at, created_at, updated_at)
        VALUES (create_demo_request.request_id, actor, created, created, created);
        k.effect := 1;
    END IF;
    RETURN k;
END
$$;
