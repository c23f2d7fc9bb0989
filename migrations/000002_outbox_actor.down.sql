ALTER TABLE outbox DROP COLUMN actor_id;
