-- refuse_expedite.sql: the end of a refused expedite, with its key's
-- answer, once the desk's steps before the refusal are undone. The
-- request's mark of it says refused: a cancel may go ahead again
-- (migration 000008).
--
-- Parameters:
--   $1 refusal_code  why it was refused (the answer's machine code),
--   $2 now           the time of the end
--   $3 request_id    and the demo request
WITH refused AS (
    UPDATE expedites SET state = 'refused', refusal_code = $1, updated_at = $2::timestamptz
    WHERE request_id = $3::uuid AND state = 'ordered'
    RETURNING request_id
)
UPDATE demo_requests d SET expedite = 'refused'
FROM refused
WHERE d.id = refused.request_id
