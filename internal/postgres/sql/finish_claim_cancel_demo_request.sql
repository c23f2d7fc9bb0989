-- finish_claim_cancel_demo_request.sql: the two-phase cancel's finish, fenced
-- by the claim token: cancel_demo_request.sql's key and request.
-- Its key-row part is that of every statement of its kind
-- (TestStatementsShareTheKeyRowsPart); effect is the business write.
-- $1 now, $2 status_code, $3 response_body, $4 response_headers,
-- $5 result_id, $6 actor_id, $7 operation, $8 idem_key, $9 claim_token;
-- the request as the cancel decided it: $10 state, $11 cancelled_at, $12 id
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
    UPDATE demo_requests SET state = $10, cancelled_at = $11::timestamptz
    FROM finished
    WHERE id = $12::uuid AND actor_id = $6 AND state = 'accepted'
    RETURNING id
), stopped AS (
    -- A delivery never tried cannot be at the desk: it is withdrawn. One tried
    -- and waiting (the desk was down, an answer was lost) is made due now: the
    -- dispatcher asks the desk whether an attempt got there and withdraws it
    -- if none did (package delivery). One a dispatcher holds (lease_token) is
    -- left to it: this UPDATE waits for the row lock a dispatcher takes it
    -- under (outbox_take_due.sql) and rechecks, so a row taken meanwhile is
    -- not withdrawn.
    UPDATE outbox o SET state = CASE WHEN o.attempts = 0 THEN 'withdrawn' ELSE o.state END,
        next_attempt_at = CASE WHEN o.attempts = 0 THEN NULL ELSE clock.now END,
        last_error = CASE WHEN o.attempts = 0 THEN NULL ELSE o.last_error END,
        updated_at = clock.now
    FROM effect, clock
    WHERE o.request_id = effect.id AND o.actor_id = $6 AND o.kind = 'submit' AND o.state = 'pending'
      AND (o.attempts = 0 OR o.lease_token IS NULL)
    RETURNING o.state
), desk_cancel AS (
    -- A delivery neither withdrawn nor refused (failed) may be at the desk:
    -- queue a keyed cancel, due now (the desk keeps a cancel that comes before
    -- its submission). seq numbers the request's cancels: one reopened and
    -- cancelled again gets a second; position places it after the request's
    -- other events. Two transitions of a request wait for each other on its
    -- row (effect); one whose statement began before the other committed,
    -- applied after it, takes the same seq or position and fails on a unique
    -- key: nothing of it commits, and it is decided again
    -- (idempotency.ErrEffectNotApplied).
    INSERT INTO outbox (request_id, actor_id, kind, seq, position, next_attempt_at, created_at, updated_at)
    SELECT s.request_id, s.actor_id, 'cancel',
        1 + coalesce((SELECT max(c.seq) FROM outbox c WHERE c.request_id = s.request_id AND c.actor_id = $6 AND c.kind = 'cancel'), 0),
        1 + (SELECT max(e.position) FROM outbox e WHERE e.request_id = s.request_id AND e.actor_id = $6),
        clock.now, clock.now, clock.now
    FROM effect JOIN outbox s ON s.request_id = effect.id AND s.actor_id = $6 AND s.kind = 'submit', clock
    WHERE s.state NOT IN ('failed', 'withdrawn') AND NOT EXISTS (SELECT 1 FROM stopped WHERE state = 'withdrawn')
    RETURNING request_id
)
SELECT EXISTS (SELECT 1 FROM finished) AS wrote, EXISTS (SELECT 1 FROM effect)::integer AS effect
