-- cancel_demo_request.sql: the one-phase cancel: the key completed with its
-- answer and, FROM it, the request cancelled and its delivery stopped
-- (create_demo_request.sql explains the key row's part).
-- Its key-row part is that of every statement of its kind
-- (TestStatementsShareTheKeyRowsPart); effect is the business write.
-- $1 now, $2 actor_id, $3 operation, $4 idem_key, $5 fingerprint,
-- $6 claim_token, $7 status_code, $8 response_body, $9 response_headers,
-- $10 result_id, $11 ttl_us;
-- the request as the cancel decided it: $12 state, $13 cancelled_at, $14 id
WITH clock AS (
    SELECT coalesce($1::timestamptz, now()) AS now
), prev AS MATERIALIZED (
    SELECT fingerprint, state, lease_until, status_code, response_body,
           response_headers, result_id, created_at, completed_at, expires_at
    FROM idempotency_keys
    WHERE actor_id = $2 AND operation = $3 AND idem_key = $4
), finished AS (
    INSERT INTO idempotency_keys AS k (actor_id, operation, idem_key,
        fingerprint, state, claim_token, lease_until, status_code, response_body,
        response_headers, result_id, created_at, completed_at, expires_at)
    SELECT $2, $3, $4,
        $5, 'completed', $6::uuid, NULL, $7::integer, $8::bytea,
        $9::jsonb, $10, clock.now, clock.now, clock.now + $11::bigint * interval '1 microsecond'
    FROM clock
    ON CONFLICT (actor_id, operation, idem_key) DO UPDATE SET
        (fingerprint, state, claim_token, lease_until, status_code, response_body,
         response_headers, result_id, created_at, completed_at, expires_at)
      = (excluded.fingerprint, excluded.state, excluded.claim_token, excluded.lease_until,
         excluded.status_code, excluded.response_body, excluded.response_headers,
         excluded.result_id, excluded.created_at, excluded.completed_at, excluded.expires_at)
    -- where idempotency.Decide takes the row over: its answer expired, or
    -- its owner's lease passed and the same intent asks again
    WHERE (k.state = 'completed' AND k.expires_at <= excluded.created_at)
       OR (k.state = 'in_progress' AND k.lease_until <= excluded.created_at AND k.fingerprint = excluded.fingerprint)
    RETURNING k.result_id
), -- the effect, FROM finished:
effect AS (
    UPDATE demo_requests SET state = $12, cancelled_at = $13::timestamptz
    FROM finished
    WHERE id = $14::uuid AND actor_id = $2 AND state = 'accepted'
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
    WHERE o.request_id = effect.id AND o.actor_id = $2 AND o.kind = 'submit' AND o.state = 'pending'
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
        1 + coalesce((SELECT max(c.seq) FROM outbox c WHERE c.request_id = s.request_id AND c.actor_id = $2 AND c.kind = 'cancel'), 0),
        1 + (SELECT max(e.position) FROM outbox e WHERE e.request_id = s.request_id AND e.actor_id = $2),
        clock.now, clock.now, clock.now
    FROM effect JOIN outbox s ON s.request_id = effect.id AND s.actor_id = $2 AND s.kind = 'submit', clock
    WHERE s.state NOT IN ('failed', 'withdrawn') AND NOT EXISTS (SELECT 1 FROM stopped WHERE state = 'withdrawn')
    RETURNING request_id
)
SELECT clock.now, EXISTS (SELECT 1 FROM finished) AS wrote, (SELECT count(*) FROM effect) AS effect, prev.*
FROM clock LEFT JOIN prev ON true
