-- refuse_expedite.sql: the end of a refused expedite, with its key's
-- answer, once the desk's steps before the refusal are undone.
--
-- Parameters:
--   $1 refusal_code  why it was refused (the answer's machine code),
--   $2 now           the time of the end
--   $3 request_id    and the demo request
UPDATE expedites SET state = 'refused', refusal_code = $1, updated_at = $2::timestamptz
WHERE request_id = $3::uuid AND state = 'ordered'
