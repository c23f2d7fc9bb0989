DROP FUNCTION outbox_take_due(regclass, regclass, timestamptz, text[], integer, uuid, bigint);
DROP FUNCTION outbox_settle(regclass, regclass, timestamptz, uuid[], text[], integer[], delivery_state[], text[], text[], bigint[], uuid[]);
DROP FUNCTION purge_expired_keys(regclass, timestamptz, timestamptz, text, text, text, integer);
