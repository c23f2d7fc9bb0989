-- get_demo_request.sql: read one of an actor's demo requests, with the
-- state of its delivery ('' when it has no outbox row).
--
-- Parameters:
--   $1 id        the demo request's id
--   $2 actor_id  the actor it must belong to
SELECT r.id, r.actor_id, r.state, r.topic, r.note, r.created_at, r.cancelled_at, coalesce(o.state::text, '') AS delivery
FROM demo_requests r LEFT JOIN outbox o ON o.request_id = r.id AND o.kind = 'submit'
WHERE r.id = $1 AND r.actor_id = $2
