-- One name per concept in Go, SQL and JSON: the fingerprint of the
-- significant fields, and the lease of an in-progress claim.
ALTER TABLE idempotency_keys RENAME COLUMN payload_hash TO fingerprint;
ALTER TABLE idempotency_keys RENAME COLUMN locked_until TO lease_until;

-- The second idempotent operation: cancelling a demo request is a state
-- change, not a creation.
ALTER TABLE demo_requests ADD COLUMN cancelled_at timestamptz;
ALTER TABLE demo_requests ADD CONSTRAINT demo_requests_state
    CHECK (state IN ('accepted', 'cancelled') AND (state = 'cancelled') = (cancelled_at IS NOT NULL));
