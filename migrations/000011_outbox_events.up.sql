-- The outbox carries any number of events of one kind per request: a
-- request cancelled, reopened (in a service that has a reopen) and
-- cancelled again has two cancels, each a row of its own with a key of its
-- own at the desk. seq numbers a request's events of one kind, 1 for the
-- first; the desk's key of the first is what it was (demo-request:<id>,
-- demo-request:<id>:cancel), and of the n-th that key with :<n> after it
-- (delivery.EventKey). The rows already here are each the first of their
-- kind, so their keys do not change.
ALTER TABLE outbox
    ADD COLUMN seq integer NOT NULL DEFAULT 1,
    DROP CONSTRAINT outbox_pkey,
    ADD PRIMARY KEY (request_id, kind, seq);
