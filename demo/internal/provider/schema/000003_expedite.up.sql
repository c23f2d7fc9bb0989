-- The review desk's resources of an expedite, a sender's operation of
-- several steps: an express slot held for an account, a charge of the
-- account's credit that uses the slot, and the sender's two compensations,
-- the release of a slot and the refund of a charge. Each row is keyed by
-- the sender's Idempotency-Key for that call, so the same key is accepted
-- once. A release may come before its slot, and a refund before its charge
-- (the sender's calls need no order): the desk keeps it, and the slot is
-- released, or the charge refunded, from the start.
CREATE SEQUENCE slot_refs;

CREATE TABLE slots (
    key         text        PRIMARY KEY,
    fingerprint text        NOT NULL,  -- hex SHA-256 of request_id and account
    request_id  text        NOT NULL,
    account     text        NOT NULL,
    reference   text        NOT NULL UNIQUE,
    accepted_at timestamptz NOT NULL,
    hold_until  timestamptz NOT NULL,  -- a charge after it is refused; the sweep then releases the slot
    state       text        NOT NULL CHECK (state IN ('held', 'charged', 'released')),
    released_by text        CHECK (released_by IN ('release', 'hold_expired')),
    CHECK ((state = 'released') = (released_by IS NOT NULL))
);

-- The sweep's work: the held slots, by the end of their hold.
CREATE INDEX slots_held_until ON slots (hold_until) WHERE state = 'held';

CREATE SEQUENCE release_refs;

CREATE TABLE releases (
    key         text        PRIMARY KEY,
    slot_key    text        NOT NULL UNIQUE, -- slots.key, which may not exist yet
    reference   text        NOT NULL UNIQUE,
    accepted_at timestamptz NOT NULL
);

-- Each account's credit: created on the account's first charge with the
-- desk's starting credit (PROVIDER_CREDIT), never below zero.
CREATE TABLE accounts (
    account text    PRIMARY KEY,
    credit  integer NOT NULL CHECK (credit >= 0)
);

CREATE SEQUENCE charge_refs;

CREATE TABLE charges (
    key         text        PRIMARY KEY,
    fingerprint text        NOT NULL,  -- hex SHA-256 of request_id, account, amount and slot_key
    request_id  text        NOT NULL,
    account     text        NOT NULL REFERENCES accounts,
    amount      integer     NOT NULL CHECK (amount BETWEEN 1 AND 1000),
    slot_key    text        NOT NULL UNIQUE REFERENCES slots, -- a slot is charged once
    reference   text        NOT NULL UNIQUE,
    accepted_at timestamptz NOT NULL
);

CREATE SEQUENCE refund_refs;

CREATE TABLE refunds (
    key         text        PRIMARY KEY,
    charge_key  text        NOT NULL UNIQUE, -- charges.key, which may not exist yet
    reference   text        NOT NULL UNIQUE,
    accepted_at timestamptz NOT NULL
);
