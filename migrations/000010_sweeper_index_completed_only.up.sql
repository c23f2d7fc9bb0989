-- The sweeper's index holds completed keys only. A claim in progress needs
-- no place in the sweeper's order: its lease keeps it, and one whose owner
-- died is found through idempotency_keys_in_progress (the sweeper's
-- statement reads both). So a two-phase claim writes one index entry
-- fewer (its row, the primary key and the in-progress index), about 75
-- bytes of WAL of some 1.6 kB per two-phase create; the finish, which
-- completes the key, adds the entry, as the one-phase create's insert does.
-- lease_until IS NULL is "completed" by the table's CHECKs, and, unlike
-- state, it is the column the in-progress index names already.
CREATE INDEX idempotency_keys_expires_at_completed ON idempotency_keys (expires_at) WHERE lease_until IS NULL;
DROP INDEX idempotency_keys_expires_at;
ALTER INDEX idempotency_keys_expires_at_completed RENAME TO idempotency_keys_expires_at;
