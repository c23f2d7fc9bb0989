-- outbox_take_due_on_shard.sql: the scan of sql/outbox_take_due.sql on the
-- shard that holds the rows of $1 shard_actor (migrations/citus/scans.sql),
-- with its parameters after: $2 now, $3 busy, $4 batch, $5 lease_token,
-- $6 lease_us.
SELECT * FROM outbox_take_due_on_shard($1, $2, $3, $4, $5, $6)
