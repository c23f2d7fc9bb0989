-- lookup_key.sql: the store's time ($1 now: the test clock; NULL for the
-- database clock) and the key row of scope $2 actor_id, $3 operation,
-- $4 idem_key (all NULL when there is none).
SELECT coalesce($1::timestamptz, now()) AS now, k.fingerprint, k.state, k.lease_until, k.status_code,
       k.response_body, k.response_headers, k.result_id, k.created_at, k.completed_at, k.expires_at
FROM (SELECT 1) one LEFT JOIN idempotency_keys k
  ON k.actor_id = $2 AND k.operation = $3 AND k.idem_key = $4
