-- One row per idempotency scope (actor, operation, key): the decision record.
CREATE TABLE idempotency_keys (
    actor_id         text        NOT NULL,
    operation        text        NOT NULL,
    idem_key         text        NOT NULL,
    payload_hash     text        NOT NULL,            -- hex SHA-256 of the significant fields
    state            text        NOT NULL CHECK (state IN ('in_progress', 'completed')),
    claim_token      uuid        NOT NULL,            -- new on every claim: fences a slow owner out
    locked_until     timestamptz,                     -- lease of an in_progress claim
    status_code      integer,
    response_body    bytea,                           -- bytes, not jsonb: replays are byte-identical
    response_headers jsonb,
    result_id        text,
    created_at       timestamptz NOT NULL,            -- time of the claim
    completed_at     timestamptz,
    expires_at       timestamptz NOT NULL,            -- claim time + TTL
    PRIMARY KEY (actor_id, operation, idem_key),
    CHECK ((state = 'in_progress') = (locked_until IS NOT NULL)),
    CHECK ((state = 'completed') = (status_code IS NOT NULL AND response_body IS NOT NULL))
);

-- The sweeper deletes expired rows in small batches, oldest first.
CREATE INDEX idempotency_keys_expires_at ON idempotency_keys (expires_at);

-- The metrics count in-progress claims and find the oldest. The predicate
-- names locked_until (set exactly while in progress, by the CHECK above), not
-- state: with state in it, the planner may pick this index for the finish's
-- "AND state = 'in_progress'" instead of the primary key.
CREATE INDEX idempotency_keys_in_progress ON idempotency_keys (created_at) WHERE locked_until IS NOT NULL;

-- The business rows.
CREATE TABLE demo_requests (
    id         uuid        PRIMARY KEY,
    actor_id   text        NOT NULL,
    topic      text        NOT NULL,
    note       text        NOT NULL,
    state      text        NOT NULL,
    created_at timestamptz NOT NULL
);

CREATE INDEX demo_requests_actor_id ON demo_requests (actor_id, created_at);
