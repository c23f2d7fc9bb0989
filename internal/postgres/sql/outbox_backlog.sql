-- outbox_backlog.sql: the pending deliveries and how many seconds the oldest
-- has been due (NULL: none; negative: none due yet) at $1 now.
SELECT count(*) AS n,
       extract(epoch FROM coalesce($1::timestamptz, now()) - min(next_attempt_at)) AS age
FROM outbox WHERE next_attempt_at IS NOT NULL -- pending, by the table's CHECK
