-- outbox_take_due.sql: take up to a batch of due deliveries, oldest due
-- first, skipping rows another dispatcher holds locked, and lease them to
-- the caller's token; each with its request's actor, topic, note, and
-- whether it is cancelled. The function outbox_take_due
-- (migrations/000005_scans.up.sql) is the statement, which takes the tables
-- it reads: here the outbox and demo_requests; on Citus, a shard's.
-- Parameters: $1 now (NULL: the database clock), $2 busy (text[], may be
-- empty), $3 batch, $4 lease_token, $5 lease_us (the lease, in microseconds).
SELECT * FROM outbox_take_due('outbox', 'demo_requests', $1, $2, $3, $4, $5)
