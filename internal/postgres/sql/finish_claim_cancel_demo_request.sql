-- finish_claim_cancel_demo_request.sql: the two-phase finish of a demo
-- request's cancel. ONE statement, hence one transaction, completes the key
-- with its answer only while the caller's claim token still holds it
-- (finished), and FROM it marks the demo request cancelled: a lost lease
-- completes nothing and changes nothing.
--
-- Parameters:
--   $1  now              the test clock; NULL for the database clock
--   $2  status_code      the stored answer: its status,
--   $3  response_body    its body,
--   $4  response_headers its headers (a JSON object),
--   $5  result_id        and the id of what it changed (NULL for none)
--   $6  actor_id         the scope: the actor,
--   $7  operation        the operation,
--   $8  idem_key         and the Idempotency-Key
--   $9  claim_token      the token of the caller's claim
--   $10 state            the demo request's new state,
--   $11 cancelled_at     its cancel time,
--   $12 id               and its id
--
-- The work decided the cancel on a read, so the write says what it expects
-- to find (still accepted); if another request cancelled it meanwhile, it
-- changes nothing (effect is 0) and the caller rolls the transaction back
-- (idempotency.ErrEffectNotApplied).
--
-- The same statement stops the request's delivery to the review desk
-- (package delivery): it withdraws a delivery never tried (withdrawn), or
-- queues a keyed cancel to the desk for one that may be there (desk_cancel).
WITH clock AS (
    SELECT coalesce($1::timestamptz, now()) AS now
), finished AS (
    UPDATE idempotency_keys SET state = 'completed', lease_until = NULL,
        status_code = $2::integer, response_body = $3::bytea,
        response_headers = $4::jsonb, result_id = $5,
        completed_at = clock.now
    FROM clock
    WHERE actor_id = $6 AND operation = $7 AND idem_key = $8
      AND claim_token = $9::uuid AND state = 'in_progress'
    RETURNING result_id
), effect AS (
    UPDATE demo_requests SET state = $10, cancelled_at = $11::timestamptz
    FROM finished
    WHERE id = $12::uuid AND actor_id = $6 AND state = 'accepted'
    RETURNING id
), withdrawn AS (
    -- A delivery never tried cannot be at the desk: withdraw it here, and
    -- the desk is never called. A dispatcher that has taken the row has
    -- counted the attempt (outbox_take_due.sql), and this UPDATE waits for
    -- its lock and checks the row again after it: attempts is 1, so it is
    -- not withdrawn and the cancel goes to the desk instead (desk_cancel).
    UPDATE outbox o SET state = 'withdrawn', next_attempt_at = NULL, lease_token = NULL,
        last_error = NULL, updated_at = clock.now
    FROM effect, clock
    WHERE o.request_id = effect.id AND o.kind = 'submit' AND o.state = 'pending' AND o.attempts = 0
    RETURNING o.request_id
), desk_cancel AS (
    -- Any other delivery may be at the desk (submitted, in flight, unknown):
    -- queue a keyed cancel, due now. The desk keeps a cancel that comes
    -- before its submission, so the two need no order. A delivery the desk
    -- refused (failed) left nothing there to cancel.
    INSERT INTO outbox (request_id, kind, next_attempt_at, created_at, updated_at)
    SELECT s.request_id, 'cancel', clock.now, clock.now, clock.now
    FROM effect JOIN outbox s ON s.request_id = effect.id AND s.kind = 'submit', clock
    WHERE s.state <> 'failed' AND NOT EXISTS (SELECT 1 FROM withdrawn)
    RETURNING request_id
)
SELECT EXISTS (SELECT 1 FROM finished) AS claimed, EXISTS (SELECT 1 FROM effect)::integer AS effect
