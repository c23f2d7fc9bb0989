-- The scope's columns compare with the database's collation again.
ALTER TABLE expedites
    ALTER COLUMN actor_id TYPE text COLLATE "default",
    ALTER COLUMN idem_key TYPE text COLLATE "default";

ALTER TABLE demo_requests
    ALTER COLUMN actor_id TYPE text COLLATE "default";

ALTER TABLE runs
    ALTER COLUMN actor_id  TYPE text COLLATE "default",
    ALTER COLUMN operation TYPE text COLLATE "default",
    ALTER COLUMN idem_key  TYPE text COLLATE "default";

ALTER TABLE idempotency_keys
    ALTER COLUMN actor_id  TYPE text COLLATE "default",
    ALTER COLUMN operation TYPE text COLLATE "default",
    ALTER COLUMN idem_key  TYPE text COLLATE "default";
