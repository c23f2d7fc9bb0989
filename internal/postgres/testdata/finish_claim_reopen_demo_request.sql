-- finish_claim_reopen_demo_request.sql: the two-phase reopen's finish,
-- fenced by the claim token: reopen_demo_request.sql's key and request.
-- $1 now, $2 status_code, $3 response_body, $4 response_headers,
-- $5 result_id, $6 actor_id, $7 operation, $8 idem_key, $9 claim_token;
-- the request: $10 id
WITH clock AS (
    SELECT coalesce($1::timestamptz, now()) AS now
), finished AS (
    UPDATE idempotency_keys SET state = 'completed', lease_until = NULL,
        status_code = $2::integer, response_body = $3::bytea,
        response_headers = $4::jsonb, result_id = $5,
        completed_at = clock.now,
        -- the TTL added in UTC: timestamp + interval is immutable, where
        -- timestamptz + interval is not, which Citus refuses beside columns
        expires_at = ((clock.now AT TIME ZONE 'UTC') + (expires_at - created_at)) AT TIME ZONE 'UTC'
    FROM clock
    WHERE actor_id = $6 AND operation = $7 AND idem_key = $8
      AND claim_token = $9::uuid AND state = 'in_progress'
    RETURNING result_id
), -- the effect, FROM finished:
effect AS (
    UPDATE demo_requests SET state = 'accepted', cancelled_at = NULL
    FROM finished
    WHERE id = $10::uuid AND actor_id = $6 AND state = 'cancelled'
    RETURNING id
), restored AS (
    -- The rule between a reverse transition and a withdrawn submission: the
    -- desk hears only of what it holds. A submission the cancel withdrew
    -- never reached the desk; the reopen puts it back, due now, and the desk
    -- gets the request once, open.
    UPDATE outbox o SET state = 'pending', next_attempt_at = clock.now, updated_at = clock.now
    FROM effect, clock
    WHERE o.request_id = effect.id AND o.actor_id = $6 AND o.kind = 'submit' AND o.state = 'withdrawn'
    RETURNING o.request_id
), event AS (
    -- its event for the desk, when the cancel it undoes queued one (the
    -- request's last event): the seq-th reopen of the request, after the
    -- request's other events (position)
    INSERT INTO outbox (request_id, actor_id, kind, seq, position, next_attempt_at, created_at, updated_at)
    SELECT effect.id, $6, 'reopen',
        1 + coalesce((SELECT max(e.seq) FROM outbox e WHERE e.request_id = effect.id AND e.actor_id = $6 AND e.kind = 'reopen'), 0),
        1 + (SELECT max(e.position) FROM outbox e WHERE e.request_id = effect.id AND e.actor_id = $6),
        clock.now, clock.now, clock.now
    FROM effect, clock
    WHERE (SELECT e.kind FROM outbox e WHERE e.request_id = effect.id AND e.actor_id = $6 ORDER BY e.position DESC LIMIT 1) = 'cancel'
    RETURNING request_id
)
SELECT EXISTS (SELECT 1 FROM finished) AS wrote, EXISTS (SELECT 1 FROM effect)::integer AS effect
