-- outbox_delivery.sql: read the delivery of one of an actor's demo
-- requests, and its cancel at the desk if the request's cancel queued one
-- (the cancel_ columns are NULL when it did not).
--
-- Parameters:
--   $1 request_id  the demo request's id
--   $2 actor_id    the actor it must belong to
SELECT o.request_id, o.state, o.attempts, o.last_error, o.next_attempt_at,
       o.provider_reference, o.updated_at,
       c.state AS cancel_state, c.attempts AS cancel_attempts, c.last_error AS cancel_last_error,
       c.next_attempt_at AS cancel_next_attempt_at, c.provider_reference AS cancel_provider_reference,
       c.updated_at AS cancel_updated_at
FROM outbox o JOIN demo_requests r ON r.id = o.request_id
LEFT JOIN outbox c ON c.request_id = o.request_id AND c.kind = 'cancel'
WHERE o.request_id = $1 AND o.kind = 'submit' AND r.actor_id = $2
