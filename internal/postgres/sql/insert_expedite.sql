-- insert_expedite.sql: the first step of an expedite (recovery point
-- "ordered"): record the order of an express review of a demo request that
-- is the actor's and still accepted, one per request. The work decided it
-- on a read, so the statement says what it expects: where the request
-- changed or another key ordered it meanwhile, it inserts nothing and the
-- run's transaction rolls back (idempotency.ErrEffectNotApplied): the next
-- turn decides afresh.
--
-- Parameters:
--   $1 idem_key    the key of the run that orders it,
--   $2 amount      the price, in the desk's credits,
--   $3 now         the time of the order,
--   $4 request_id  the demo request
--   $5 actor_id    and its actor
INSERT INTO expedites (request_id, actor_id, idem_key, state, amount, created_at, updated_at)
SELECT d.id, d.actor_id, $1, 'ordered', $2::integer, $3::timestamptz, $3::timestamptz
FROM demo_requests d
WHERE d.id = $4::uuid AND d.actor_id = $5 AND d.state = 'accepted'
ON CONFLICT (request_id) DO NOTHING
