-- finish_claim_answer_only.sql: complete a two-phase claim, fenced by its
-- token, with an answer that changes nothing but its key.
-- Its key-row part is that of every statement of its kind
-- (TestStatementsShareTheKeyRowsPart); effect is the business write.
-- $1 now, $2 status_code, $3 response_body, $4 response_headers,
-- $5 result_id, $6 actor_id, $7 operation, $8 idem_key, $9 claim_token
WITH clock AS (
    SELECT coalesce($1::timestamptz, now()) AS now
), finished AS (
    UPDATE idempotency_keys SET state = 'completed', lease_until = NULL,
        status_code = $2::integer, response_body = $3::bytea,
        response_headers = $4::jsonb, result_id = $5,
        completed_at = clock.now,
        -- the TTL added in UTC: timestamp + interval is immutable, where
        -- timestamptz + interval is not, which Citus refuses beside columns
        expires_at = ((clock.now AT TIME ZONE 'UTC') + (expires_at - created_at)) AT TIME ZONE 'UTC'
    FROM clock
    WHERE actor_id = $6 AND operation = $7 AND idem_key = $8
      AND claim_token = $9::uuid AND state = 'in_progress'
    RETURNING result_id
), -- the effect, FROM finished:
effect AS (
    SELECT FROM finished WHERE false
)
SELECT EXISTS (SELECT 1 FROM finished) AS wrote, EXISTS (SELECT 1 FROM effect)::integer AS effect
