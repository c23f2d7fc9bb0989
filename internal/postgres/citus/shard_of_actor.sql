-- shard_of_actor.sql: the shard of idempotency_keys that holds the rows of
-- each actor of $1 actors (text[]), in their order.
SELECT get_shard_id_for_distribution_column('idempotency_keys', u.a)
FROM unnest($1::text[]) WITH ORDINALITY AS u(a, i)
ORDER BY u.i
