-- outbox_settle.sql: record the marks of deliveries still leased to the
-- token they were taken under, and return how many rows it changed. The
-- function outbox_settle (migrations/000005_scans.up.sql) is the statement,
-- which takes the tables it reads: here the outbox and demo_requests; on
-- Citus, a shard's.
-- Parameters: $1 now (NULL: the database clock); per delivery: $2 request_ids,
-- $3 kinds, $4 seqs, $5 states, $6 references ('' for none), $7 errors ('' for
-- none), $8 retry_us (when a pending one is tried again), $9 lease_tokens.
SELECT outbox_settle('outbox', 'demo_requests', $1, $2, $3, $4, $5, $6, $7, $8, $9)
