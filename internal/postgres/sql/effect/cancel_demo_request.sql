-- cancel_demo_request.sql: the effect of a demo request's cancel, written
-- FROM the key row its statement completes (finished): it marks the demo
-- request cancelled. sql/key/ holds the rest of each statement it is part
-- of: free.sql, takeover.sql and finish.sql.
--
-- Parameters, after the key's (each statement numbers them after its own):
--   :1 state             the demo request's new state,
--   :2 cancelled_at      its cancel time,
--   :3 id                and its id
--   :actor_id  the scope's actor (a key parameter)
--
-- The work decided the cancel on a read, so the write says what it expects
-- to find (still accepted); if another request changed it meanwhile, it
-- changes nothing (effect is 0) and the caller rolls the transaction back
-- (idempotency.ErrEffectNotApplied): the next turn decides afresh.
--
-- The same statement stops the request's delivery to the review desk
-- (package delivery): it withdraws a delivery never tried, makes a tried
-- one due at once so the dispatcher settles it without sending (stopped),
-- and queues a keyed cancel to the desk for one that may be there
-- (desk_cancel).
effect AS (
    UPDATE demo_requests SET state = :1, cancelled_at = :2::timestamptz
    FROM finished
    WHERE id = :3::uuid AND actor_id = :actor_id AND state = 'accepted'
    RETURNING id
), stopped AS (
    -- A delivery never tried cannot be at the desk: it is withdrawn here,
    -- and the desk is never called. One tried and waiting for its next
    -- attempt (the desk was down, an answer was lost) is made due at once:
    -- the dispatcher never submits a cancelled request, it asks the desk
    -- whether an earlier attempt got there and withdraws the delivery if
    -- none did (package delivery). One a dispatcher holds (lease_token) is
    -- left to that attempt. A dispatcher that takes the row counts its
    -- attempt under the row's lock (outbox_take_due.sql); this UPDATE
    -- waits for that lock and checks the row again after it, so a row
    -- taken meanwhile is not withdrawn.
    UPDATE outbox o SET state = CASE WHEN o.attempts = 0 THEN 'withdrawn' ELSE o.state END,
        next_attempt_at = CASE WHEN o.attempts = 0 THEN NULL ELSE clock.now END,
        last_error = CASE WHEN o.attempts = 0 THEN NULL ELSE o.last_error END,
        updated_at = clock.now
    FROM effect, clock
    WHERE o.request_id = effect.id AND o.kind = 'submit' AND o.state = 'pending'
      AND (o.attempts = 0 OR o.lease_token IS NULL)
    RETURNING o.state
), desk_cancel AS (
    -- Any delivery not withdrawn may be at the desk (submitted, in flight,
    -- unknown, or tried and unclear): queue a keyed cancel, due now. The
    -- desk keeps a cancel that comes before its submission, so the two need
    -- no order. A delivery the desk refused (failed) left nothing there to
    -- cancel, nor one an earlier cancel withdrew.
    --
    -- The cancel is the next of the request's cancels (seq): a request
    -- reopened and cancelled again gets a second, under a key of its own.
    -- Two cancels of one request wait for each other on its row (effect);
    -- one whose statement began before the other committed, and that a
    -- reopen between them let apply, does not see the other's cancel here,
    -- takes the same seq, and fails on the primary key: its key is
    -- released, and its retry counts again.
    INSERT INTO outbox (request_id, kind, seq, next_attempt_at, created_at, updated_at)
    SELECT s.request_id, 'cancel',
        1 + coalesce((SELECT max(c.seq) FROM outbox c WHERE c.request_id = s.request_id AND c.kind = 'cancel'), 0),
        clock.now, clock.now, clock.now
    FROM effect JOIN outbox s ON s.request_id = effect.id AND s.kind = 'submit', clock
    WHERE s.state NOT IN ('failed', 'withdrawn') AND NOT EXISTS (SELECT 1 FROM stopped WHERE state = 'withdrawn')
    RETURNING request_id
