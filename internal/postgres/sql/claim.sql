-- claim.sql: claim a key for a two-phase request: write its row in progress,
-- owned by the claim token until the lease ends, where the key is free or
-- its row may be taken over; otherwise write nothing. It returns the row
-- that was there: write_key (migrations/000002_write_key.up.sql) says how,
-- and why a claim commits without waiting for its WAL flush.
-- Parameters: $1 now (the test clock; NULL for the database clock); the scope:
-- $2 actor_id, $3 operation, $4 idem_key; $5 claim_token (new on every
-- claim: it fences a slow owner out); $6 fingerprint; $7 lease_us; $8 ttl_us.
SELECT * FROM write_key($1, $2, $3, $4, $5, false, $6, $7, $8, NULL, NULL, NULL, NULL)
