DROP TABLE demo_requests;
DROP TABLE idempotency_keys;
