-- Back to one outbox row per request and kind: the events after the first
-- of their kind are dropped.
DELETE FROM outbox WHERE seq > 1;

ALTER TABLE outbox
    DROP CONSTRAINT outbox_pkey,
    DROP COLUMN seq,
    ADD PRIMARY KEY (request_id, kind);
