DROP INDEX outbox_position;
ALTER TABLE outbox DROP COLUMN position;
CREATE TYPE outbox_kind AS ENUM ('submit', 'cancel');
ALTER TABLE outbox ALTER COLUMN kind DROP DEFAULT,
    ALTER COLUMN kind TYPE outbox_kind USING kind::outbox_kind,
    ALTER COLUMN kind SET DEFAULT 'submit';
