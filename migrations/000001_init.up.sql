-- The keys: one row per idempotency scope (actor, operation, key), the
-- decision record of one intent. The scope compares as bytes (COLLATE "C"):
-- keys are opaque, two keys are the same only when their bytes are, and the
-- unique index that decides every race then depends on no C library's
-- collation rules.
CREATE TYPE key_state AS ENUM ('in_progress', 'completed');

CREATE TABLE idempotency_keys (
    actor_id         text COLLATE "C" NOT NULL,
    operation        text COLLATE "C" NOT NULL,
    idem_key         text COLLATE "C" NOT NULL,
    fingerprint      text        NOT NULL,  -- hex SHA-256 of the significant fields
    state            key_state   NOT NULL,  -- an enum is checked once, when a statement is planned
    claim_token      uuid        NOT NULL,  -- new on every claim: fences a slow owner out
    lease_until      timestamptz,           -- the lease of a claim in progress
    status_code      integer,
    response_body    bytea,                 -- bytes, not jsonb: replays are byte-identical
    response_headers jsonb,
    result_id        text,
    created_at       timestamptz NOT NULL,  -- time of the claim
    completed_at     timestamptz,
    expires_at       timestamptz NOT NULL,  -- once completed: the answer's time + TTL
    PRIMARY KEY (actor_id, operation, idem_key),
    CONSTRAINT idempotency_keys_lease_while_in_progress CHECK ((state = 'in_progress') = (lease_until IS NOT NULL)),
    -- "Completed has its answer", said with the lease: a NULL test is
    -- cheaper to check on every write than an enum comparison.
    CONSTRAINT idempotency_keys_answer_when_completed CHECK ((lease_until IS NULL) = (status_code IS NOT NULL AND response_body IS NOT NULL))
);

-- The sweeper deletes expired completed keys, oldest first. A claim in
-- progress needs no entry: its lease keeps it.
CREATE INDEX idempotency_keys_expires_at ON idempotency_keys (expires_at) WHERE lease_until IS NULL;

-- The metrics count the claims in progress and find the oldest. The
-- predicate names lease_until, not state: with state in it, the planner may
-- pick this index for the finish's "AND state = 'in_progress'" instead of
-- the primary key.
CREATE INDEX idempotency_keys_in_progress ON idempotency_keys (created_at) WHERE lease_until IS NOT NULL;

-- The business rows: a demo request, created and cancelled.
CREATE TABLE demo_requests (
    id           uuid        PRIMARY KEY,
    actor_id     text COLLATE "C" NOT NULL,
    topic        text        NOT NULL,
    note         text        NOT NULL,
    state        text        NOT NULL,
    created_at   timestamptz NOT NULL,
    cancelled_at timestamptz,
    CONSTRAINT demo_requests_state
        CHECK (state IN ('accepted', 'cancelled') AND (state = 'cancelled') = (cancelled_at IS NOT NULL))
);

CREATE INDEX demo_requests_actor_id ON demo_requests (actor_id, created_at);

-- The outbox: what the other system (the review desk) must be told, one row
-- per event, written by the same statement that changes the request and
-- completes its key, FROM the request it writes (so no foreign key: the
-- statement is the reference). The dispatcher (package delivery) hands each
-- row to the desk under a key derived from it and records what became of
-- it. kind is the event's, named by its operation (plain text: an
-- operation with an event of its own needs no change here); seq numbers a
-- request's events of one kind, 1 for the first: a request cancelled,
-- reopened and cancelled again has two cancels, each with its own key at
-- the desk (delivery.EventKey). The outbox names its request's actor, as
-- every other table does: a statement that writes or joins an outbox row
-- can then say whose it is, which is what a table distributed by the actor
-- needs to keep the statement on one shard (migrations/citus).
CREATE TYPE delivery_state AS ENUM ('pending', 'submitted', 'unknown', 'failed', 'withdrawn');

CREATE TABLE outbox (
    request_id         uuid           NOT NULL,           -- demo_requests.id
    actor_id           text COLLATE "C" NOT NULL,         -- demo_requests.actor_id
    kind               text COLLATE "C" NOT NULL DEFAULT 'submit',
    seq                integer        NOT NULL DEFAULT 1,
    position           integer        NOT NULL DEFAULT 1, -- of the request's events, in queue order: 1 for the submission
    state              delivery_state NOT NULL DEFAULT 'pending',
    attempts           integer        NOT NULL DEFAULT 0, -- attempts taken; after the first, each asks the desk first
    next_attempt_at    timestamptz,                       -- when it is due; while taken, the end of the lease
    lease_token        uuid,                              -- the dispatcher that took it last: fences its mark
    last_error         text,
    provider_reference text,
    created_at         timestamptz    NOT NULL,
    updated_at         timestamptz    NOT NULL,
    PRIMARY KEY (request_id, kind, seq),
    CONSTRAINT outbox_pending_is_due CHECK ((state = 'pending') = (next_attempt_at IS NOT NULL)),
    CONSTRAINT outbox_submitted_has_reference CHECK ((state = 'submitted') = (provider_reference IS NOT NULL))
);

-- The dispatcher takes the rows due first; the metrics count the backlog.
CREATE INDEX outbox_due ON outbox (next_attempt_at) WHERE next_attempt_at IS NOT NULL;

-- The dispatcher hands a request's events to the desk in the order their
-- statements queued them (outbox_take_due.sql). Two transitions of a
-- request wait for each other on its row; one whose statement began before
-- the other committed takes the same position and fails here, and is
-- decided again.
CREATE UNIQUE INDEX outbox_position ON outbox (request_id, actor_id, position);
