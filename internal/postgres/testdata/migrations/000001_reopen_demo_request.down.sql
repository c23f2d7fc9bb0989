DROP FUNCTION reopen_demo_request(timestamptz, text, text, text, uuid, boolean, text, bigint, integer, bytea, jsonb, text, uuid);
