DROP TABLE outbox;
DROP TYPE delivery_state;
DROP TABLE demo_requests;
DROP TABLE idempotency_keys;
DROP TYPE key_state;
