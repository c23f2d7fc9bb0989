-- release_claim.sql: delete a claim while it is still the caller's and
-- still in progress, so the next request with the key runs as a first one.
-- A finish whose commit went through unseen (the connection broke after it)
-- left the key completed, and the release leaves it alone.
--
-- Parameters:
--   $1 actor_id     the scope: the actor,
--   $2 operation    the operation,
--   $3 idem_key     and the Idempotency-Key
--   $4 claim_token  the token of the caller's claim
DELETE FROM idempotency_keys
WHERE actor_id = $1 AND operation = $2 AND idem_key = $3
  AND claim_token = $4::uuid AND state = 'in_progress'
