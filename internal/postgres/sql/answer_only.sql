-- answer_only.sql: the answer that changes nothing but its key (a refusal),
-- in one phase or as a claim's finish: write_key
-- (migrations/000002_write_key.up.sql) alone.
-- $1 now, $2 actor_id, $3 operation, $4 idem_key, $5 claim_token, $6 finish,
-- $7 fingerprint, $8 ttl_us, $9 status_code, $10 response_body,
-- $11 response_headers, $12 result_id
SELECT * FROM write_key($1, $2, $3, $4, $5, $6, $7, NULL, $8, $9, $10, $11, $12)
