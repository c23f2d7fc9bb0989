-- outbox_delivery.sql: the outbox rows of demo request $1 request_id of actor
-- $2 actor_id: its submission, then its other events (cancels, and a
-- service's own kinds), in the order they were queued. No row: no such
-- request of the actor.
SELECT o.request_id, o.kind, o.seq, o.state, o.attempts, o.last_error, o.next_attempt_at,
       o.provider_reference, o.updated_at
FROM outbox o JOIN demo_requests r ON r.id = o.request_id AND r.actor_id = o.actor_id
WHERE o.request_id = $1 AND o.actor_id = $2
ORDER BY o.position
