-- bench-citus.sql: what make bench-citus (scripts/citus.sh bench) measures
-- a create against, made in the bench's database after the migrations and
-- never by them: the create's business effect alone. bench_effect is
-- create_demo_request (migrations/000003) without its key: the same
-- arguments, the same result type, the same two rows (the request and its
-- outbox row), and no write_key. On Citus migrate up delegates it as it
-- delegates the store's key writes (postgres.Distribute: any function that
-- returns key_write), with their settings, so the two differ by the key row
-- alone.
CREATE OR REPLACE FUNCTION bench_effect(at timestamptz, actor text, op text, scope_key text, token uuid, finish boolean,
    fp text, ttl_us bigint, status integer, body bytea, headers jsonb, result text,
    request_id uuid, request_state text, topic text, note text, created timestamptz)
RETURNS key_write
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    k key_write;
BEGIN
    k.now := coalesce(at, pg_catalog.now());
    k.wrote := true;
    INSERT INTO demo_requests (id, actor_id, state, topic, note, created_at)
    VALUES (request_id, actor, request_state, bench_effect.topic, bench_effect.note, created);
    INSERT INTO outbox (request_id, actor_id, next_attempt_at, created_at, updated_at)
    VALUES (bench_effect.request_id, actor, created, created, created);
    k.effect := 1;
    RETURN k;
END
$$;
