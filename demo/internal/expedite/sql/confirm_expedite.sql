-- confirm_expedite.sql: the finish of an expedite, with its key's answer:
-- the order is confirmed with the desk's slot and charge, and so is the
-- request's mark of it, which a cancel checks (migration 000008).
--
-- Parameters:
--   $1 slot_reference    the desk's slot,
--   $2 charge_reference  the desk's charge,
--   $3 now               the time of the finish
--   $4 request_id        and the demo request
WITH confirmed AS (
    UPDATE expedites SET state = 'confirmed', slot_reference = $1, charge_reference = $2,
        updated_at = $3::timestamptz
    WHERE request_id = $4::uuid AND state = 'ordered'
    RETURNING request_id
)
UPDATE demo_requests d SET expedite = 'confirmed'
FROM confirmed
WHERE d.id = confirmed.request_id
