DROP TABLE outbox;
DROP TYPE outbox_kind;
DROP TYPE delivery_state;
DROP TABLE demo_requests;
DROP TABLE idempotency_keys;
DROP TYPE key_state;
