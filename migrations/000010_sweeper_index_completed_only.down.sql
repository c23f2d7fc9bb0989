-- The sweeper's index holds every key again, claims in progress included.
CREATE INDEX idempotency_keys_expires_at_all ON idempotency_keys (expires_at);
DROP INDEX idempotency_keys_expires_at;
ALTER INDEX idempotency_keys_expires_at_all RENAME TO idempotency_keys_expires_at;
