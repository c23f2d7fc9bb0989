-- The scope of a key (actor, operation, key) compares as bytes, whatever
-- collation the database was created with. Keys are opaque: nobody sorts
-- them for a reader, and two keys are the same key only when their bytes
-- are. Under a language collation (en_US.utf8, the default of the postgres
-- Docker image) every comparison the unique index makes goes through the C
-- library's strcoll, and the index's order depends on that library's
-- version: an operating system upgrade that changes its rules leaves the
-- index that decides every race out of order until it is rebuilt. "C" has
-- neither cost nor risk.
--
-- Every table that holds a part of a scope gets it, so that the joins and
-- the foreign key between them compare the same way. Changing a column's
-- collation rebuilds the indexes on it (not the table) under an exclusive
-- lock: fine at this size; a large table would want the rebuild planned.
ALTER TABLE idempotency_keys
    ALTER COLUMN actor_id  TYPE text COLLATE "C",
    ALTER COLUMN operation TYPE text COLLATE "C",
    ALTER COLUMN idem_key  TYPE text COLLATE "C";

ALTER TABLE runs
    ALTER COLUMN actor_id  TYPE text COLLATE "C",
    ALTER COLUMN operation TYPE text COLLATE "C",
    ALTER COLUMN idem_key  TYPE text COLLATE "C";

ALTER TABLE demo_requests
    ALTER COLUMN actor_id TYPE text COLLATE "C";

ALTER TABLE expedites
    ALTER COLUMN actor_id TYPE text COLLATE "C",
    ALTER COLUMN idem_key TYPE text COLLATE "C";
