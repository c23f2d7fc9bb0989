-- cancel_demo_request.sql: the cancel, in one phase or as a claim's finish:
-- the function cancel_demo_request
-- (migrations/000004_cancel_demo_request.up.sql), which writes the key
-- (write_key) and, only where it did, cancels the request and stops its
-- delivery.
-- $1 now, $2 actor_id, $3 operation, $4 idem_key, $5 claim_token, $6 finish,
-- $7 fingerprint, $8 ttl_us, $9 status_code, $10 response_body,
-- $11 response_headers, $12 result_id;
-- the request as the cancel decided it: $13 state, $14 cancelled_at, $15 id
SELECT * FROM cancel_demo_request($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
