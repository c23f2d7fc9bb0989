ALTER TABLE demo_requests DROP CONSTRAINT demo_requests_state;
ALTER TABLE demo_requests DROP COLUMN cancelled_at;
ALTER TABLE idempotency_keys RENAME COLUMN lease_until TO locked_until;
ALTER TABLE idempotency_keys RENAME COLUMN fingerprint TO payload_hash;
