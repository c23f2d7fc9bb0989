-- release_claim.sql: delete the claim of scope $1 actor_id, $2 operation,
-- $3 idem_key while $4 claim_token still holds it in progress, so the key runs
-- again as new; a key a finish completed (its reply lost) stays.
DELETE FROM idempotency_keys
WHERE actor_id = $1 AND operation = $2 AND idem_key = $3
  AND claim_token = $4::uuid AND state = 'in_progress'
