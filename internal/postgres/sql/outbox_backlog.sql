-- outbox_backlog.sql: how many deliveries are pending, and for how many
-- seconds the one due longest has been due (NULL when none is; negative
-- when none is due yet), by the store's time.
--
-- Parameters:
--   $1 now  the test clock; NULL for the database clock
SELECT count(*) AS n,
       extract(epoch FROM coalesce($1::timestamptz, now()) - min(next_attempt_at)) AS age
FROM outbox WHERE next_attempt_at IS NOT NULL -- pending, by the table's CHECK
