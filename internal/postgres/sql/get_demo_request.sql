-- get_demo_request.sql: demo request $1 id of actor $2 actor_id, with its
-- delivery's state ('' without an outbox row).
SELECT r.id, r.actor_id, r.state, r.topic, r.note, r.created_at, r.cancelled_at, coalesce(o.state::text, '') AS delivery
FROM demo_requests r LEFT JOIN outbox o ON o.request_id = r.id AND o.actor_id = r.actor_id AND o.kind = 'submit'
WHERE r.id = $1 AND r.actor_id = $2
