-- The outbox: one row per accepted demo request, written by the same
-- statement that creates the request and completes its key, FROM the request
-- it inserts (so no foreign key: the statement is the reference, and the
-- create pays for no check and no lock on the new request). The dispatcher
-- hands each row to the review desk under the key demo-request:<request_id>
-- (delivery.ProviderKey) and records what became of it.
CREATE TABLE outbox (
    request_id         uuid        PRIMARY KEY,        -- demo_requests.id
    state              text        NOT NULL DEFAULT 'pending'
                                   CHECK (state IN ('pending', 'submitted', 'unknown', 'failed')),
    attempts           integer     NOT NULL DEFAULT 0, -- attempts taken; after the first, each asks the desk first
    next_attempt_at    timestamptz,                    -- when it is due; while taken, the end of the lease
    lease_token        uuid,                           -- the dispatcher that took it last: fences its mark
    last_error         text,
    provider_reference text,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL,
    CHECK ((state = 'pending') = (next_attempt_at IS NOT NULL)),
    CHECK ((state = 'submitted') = (provider_reference IS NOT NULL))
);

-- The dispatcher takes the rows due first; the metrics count the backlog.
CREATE INDEX outbox_due ON outbox (next_attempt_at) WHERE next_attempt_at IS NOT NULL;
