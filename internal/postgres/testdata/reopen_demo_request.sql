-- reopen_demo_request.sql: a third operation's statement, as docs/operations.md's
-- "A second operation" adds one: the function reopen_demo_request
-- (testdata/migrations/000001_reopen_demo_request.up.sql).
-- $1 now, $2 actor_id, $3 operation, $4 idem_key, $5 claim_token, $6 finish,
-- $7 fingerprint, $8 ttl_us, $9 status_code, $10 response_body,
-- $11 response_headers, $12 result_id; the request: $13 id
SELECT * FROM reopen_demo_request($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
