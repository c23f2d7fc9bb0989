-- get_expedite.sql: read the expedite of one of an actor's demo requests.
--
-- Parameters:
--   $1 request_id  the demo request,
--   $2 actor_id    and its actor
SELECT request_id, idem_key, state, amount, coalesce(slot_reference, '') AS slot_reference,
       coalesce(charge_reference, '') AS charge_reference, coalesce(refusal_code, '') AS refusal_code,
       created_at, updated_at
FROM expedites
WHERE request_id = $1::uuid AND actor_id = $2
