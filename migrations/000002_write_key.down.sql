DROP FUNCTION write_key(timestamptz, text, text, text, uuid, boolean, text, bigint, bigint, integer, bytea, jsonb, text);
DROP TYPE key_write;
