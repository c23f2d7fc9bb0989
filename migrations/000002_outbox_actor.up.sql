-- The outbox names its request's actor, as every other table does: a
-- statement that writes or joins an outbox row can then say whose it is
-- (o.actor_id = r.actor_id), which is what a table distributed by the
-- actor needs to keep the statement on one shard (migrations/citus).
ALTER TABLE outbox ADD COLUMN actor_id text COLLATE "C";
UPDATE outbox o SET actor_id = r.actor_id FROM demo_requests r WHERE r.id = o.request_id;
ALTER TABLE outbox ALTER COLUMN actor_id SET NOT NULL;
