-- outbox_delivery.sql: read the events of one of an actor's demo requests
-- in the outbox: its submission, then the cancels its cancels queued (none,
-- or several for a request reopened and cancelled again), each kind in the
-- order of seq. No row: no such request of the actor.
--
-- Parameters:
--   $1 request_id  the demo request's id
--   $2 actor_id    the actor it must belong to
SELECT o.request_id, o.kind, o.seq, o.state, o.attempts, o.last_error, o.next_attempt_at,
       o.provider_reference, o.updated_at
FROM outbox o JOIN demo_requests r ON r.id = o.request_id
WHERE o.request_id = $1 AND r.actor_id = $2
ORDER BY o.kind, o.seq
