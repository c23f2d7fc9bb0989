-- outbox_settle_on_shard.sql: the scan of sql/outbox_settle.sql on the
-- shard that holds the rows of $1 shard_actor (migrations/citus/scans.sql),
-- with its parameters after: $2 now, $3 request_ids, $4 kinds, $5 seqs,
-- $6 states, $7 references, $8 errors, $9 retry_us, $10 lease_tokens. It
-- returns how many rows it changed.
SELECT outbox_settle_on_shard($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
