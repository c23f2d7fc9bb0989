-- lookup_key.sql: read a scope's key row, if any (all NULL when there is
-- none), and the store's time.
--
-- Parameters:
--   $1 now        the test clock; NULL for the database clock
--   $2 actor_id   the scope: the actor,
--   $3 operation  the operation,
--   $4 idem_key   and the Idempotency-Key
SELECT coalesce($1::timestamptz, now()) AS now, k.fingerprint, k.state, k.lease_until, k.status_code,
       k.response_body, k.response_headers, k.result_id, k.created_at, k.completed_at, k.expires_at
FROM (SELECT 1) one LEFT JOIN idempotency_keys k
  ON k.actor_id = $2 AND k.operation = $3 AND k.idem_key = $4
