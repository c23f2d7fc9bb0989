-- insert_expedite.sql: the first step of an expedite (recovery point
-- "ordered"): record the order of an express review of a demo request that
-- is the actor's, still accepted and never expedited, one per request. It
-- marks the request's row (expedite = 'ordered'), which a cancel checks:
-- the rule between the two is decided on that one row (migration 000008).
-- The work decided it on a read, so the statement says what it expects:
-- where the request changed or another key ordered it meanwhile, it
-- inserts nothing and the run's transaction rolls back
-- (idempotency.ErrEffectNotApplied): the next turn decides afresh.
--
-- Parameters:
--   $1 request_id  the demo request
--   $2 actor_id    and its actor,
--   $3 idem_key    the key of the run that orders it,
--   $4 amount      the price, in the desk's credits,
--   $5 now         the time of the order
WITH marked AS (
    UPDATE demo_requests SET expedite = 'ordered'
    WHERE id = $1::uuid AND actor_id = $2 AND state = 'accepted' AND expedite IS NULL
    RETURNING id, actor_id
)
INSERT INTO expedites (request_id, actor_id, idem_key, state, amount, created_at, updated_at)
SELECT marked.id, marked.actor_id, $3, 'ordered', $4::integer, $5::timestamptz, $5::timestamptz
FROM marked
