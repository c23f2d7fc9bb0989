-- scale_fill.sql: add completed keys number $2 up to $3 (exclusive) to the
-- key table in one statement, each a copy of a real completed key (its
-- actor, operation, fingerprint and stored answer, so every row is as large
-- as a create makes it) under a key of its own: a version 4 UUID made from
-- the md5 of the run's seed and the row's number, so that the keys are
-- spread over the primary key as random UUIDs are, and the bench can name
-- any of them to replay it (scaleKey in scale_fill.go makes the same).
-- One statement writes its rows in the order of their keys (the sort
-- below): the primary key takes them in one pass over its pages instead of
-- one random page each, several times faster once the index outgrows
-- shared buffers. Their creation times follow the same order, so that the
-- table holds its rows in the order they were created, as a real one does
-- (the sweeper deletes the oldest, page after page): the n-th row written
-- in all is the n-th created. Row 0 is the oldest, $6 younger than the TTL,
-- and row $4 would be now, so the rows expire evenly over the TTL, the
-- first $6 from now.
--
-- Parameters:
--   $1 seed      the run's seed
--   $2 first     the first row's number
--   $3 end       the number after the last row's
--   $4 total     the number of rows of the largest fill: row $4 would be now
--   $5 ttl_us    the TTL, in microseconds
--   $6 margin_us how long before the first row expires, in microseconds
--   $7 actor_id  the real key to copy: its actor,
--   $8 operation its operation,
--   $9 idem_key  and its key
INSERT INTO idempotency_keys (actor_id, operation, idem_key,
    fingerprint, state, claim_token, lease_until, status_code, response_body,
    response_headers, result_id, created_at, completed_at, expires_at)
SELECT t.actor_id, t.operation, f.idem_key,
    t.fingerprint, 'completed', gen_random_uuid(), NULL, t.status_code, t.response_body,
    t.response_headers, t.result_id, f.at, f.at, f.at + $5::bigint * interval '1 microsecond'
FROM (
    SELECT * FROM idempotency_keys WHERE actor_id = $7 AND operation = $8 AND idem_key = $9
) AS t, LATERAL (
    SELECT k.idem_key,
           now() - ($5::bigint - $6::bigint) * interval '1 microsecond'
                   * (1 - ($2::bigint + row_number() OVER (ORDER BY k.idem_key) - 1)::float8 / $4::bigint) AS at
    FROM (
        SELECT overlay(overlay(md5($1 || ':' || i) PLACING '4' FROM 13) PLACING '8' FROM 17)::uuid::text AS idem_key
        FROM generate_series($2::bigint, $3::bigint - 1) AS i
    ) AS k
    ORDER BY k.idem_key
) AS f
