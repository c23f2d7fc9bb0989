-- reopen_demo_request.sql: a third operation, as the README's "A second
-- operation" adds one (TestAThirdOperationsEventsReachTheDeskInOrder): the
-- one-phase reopen, the key completed with its answer and, FROM it, the
-- cancelled request accepted again and the desk told as far as it heard of
-- the cancel: its withdrawn submission put back, or a reopen event queued
-- (TestAReopenPutsAWithdrawnSubmissionBack).
-- $1 now, $2 actor_id, $3 operation, $4 idem_key, $5 fingerprint,
-- $6 claim_token, $7 status_code, $8 response_body, $9 response_headers,
-- $10 result_id, $11 ttl_us; the request: $12 id
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
    UPDATE demo_requests SET state = 'accepted', cancelled_at = NULL
    FROM finished
    WHERE id = $12::uuid AND actor_id = $2 AND state = 'cancelled'
    RETURNING id
), restored AS (
    -- The rule between a reverse transition and a withdrawn submission: the
    -- desk hears only of what it holds. A submission the cancel withdrew
    -- never reached the desk; the reopen puts it back, due now, and the desk
    -- gets the request once, open.
    UPDATE outbox o SET state = 'pending', next_attempt_at = clock.now, updated_at = clock.now
    FROM effect, clock
    WHERE o.request_id = effect.id AND o.actor_id = $2 AND o.kind = 'submit' AND o.state = 'withdrawn'
    RETURNING o.request_id
), event AS (
    -- its event for the desk, when the cancel it undoes queued one (the
    -- request's last event): the seq-th reopen of the request, after the
    -- request's other events (position)
    INSERT INTO outbox (request_id, actor_id, kind, seq, position, next_attempt_at, created_at, updated_at)
    SELECT effect.id, $2, 'reopen',
        1 + coalesce((SELECT max(e.seq) FROM outbox e WHERE e.request_id = effect.id AND e.actor_id = $2 AND e.kind = 'reopen'), 0),
        1 + (SELECT max(e.position) FROM outbox e WHERE e.request_id = effect.id AND e.actor_id = $2),
        clock.now, clock.now, clock.now
    FROM effect, clock
    WHERE (SELECT e.kind FROM outbox e WHERE e.request_id = effect.id AND e.actor_id = $2 ORDER BY e.position DESC LIMIT 1) = 'cancel'
    RETURNING request_id
)
SELECT clock.now, EXISTS (SELECT 1 FROM finished) AS wrote, (SELECT count(*) FROM effect) AS effect, prev.*
FROM clock LEFT JOIN prev ON true
