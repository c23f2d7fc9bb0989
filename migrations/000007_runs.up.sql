-- An operation of several steps (idempotency.StepWise) keeps a run beside
-- its key: the input it was asked, the last recovery point reached, and
-- what the other systems answered. Any runner of the key (a retry that took
-- it over, the completer) continues the run from there. Every write to a
-- run is fenced by its key's claim token (sql/save_run.sql).
CREATE TYPE run_state AS ENUM ('running', 'compensating', 'done', 'needs_attention');

CREATE TABLE runs (
    actor_id   text        NOT NULL,
    operation  text        NOT NULL,
    idem_key   text        NOT NULL,
    input      jsonb       NOT NULL,           -- the operation's input, as decoded
    point      text        NOT NULL,           -- the last recovery point: the last step done, '' before the first
    state      run_state   NOT NULL,
    refs       jsonb       NOT NULL,           -- the other systems' references, by step ("undo:<step>" for an undo)
    refusal    jsonb,                          -- while compensating: the answer to store once undone
    attempts   integer     NOT NULL,           -- turns taken: the first runner and each that took it over
    last_error text,
    started_at timestamptz NOT NULL,           -- its start, or an operator's resume: its limit counts from here
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (actor_id, operation, idem_key),
    -- A run lives and dies with its key; the sweeper never deletes the key
    -- of an unfinished run, whose lease holds it.
    FOREIGN KEY (actor_id, operation, idem_key) REFERENCES idempotency_keys ON DELETE CASCADE,
    CHECK (state <> 'compensating' OR refusal IS NOT NULL)
);

-- The completer looks for unfinished runs; the metrics count those that
-- need attention.
CREATE INDEX runs_unfinished ON runs (updated_at) WHERE state IN ('running', 'compensating');
CREATE INDEX runs_needing_attention ON runs (updated_at) WHERE state = 'needs_attention';

-- The business rows of the operation of several steps: an express review
-- of a demo request, paid at the review desk (package demo, Expedite). One
-- per request.
CREATE TYPE expedite_state AS ENUM ('ordered', 'confirmed', 'refused');

CREATE TABLE expedites (
    request_id       uuid           PRIMARY KEY REFERENCES demo_requests (id),
    actor_id         text           NOT NULL,
    idem_key         text           NOT NULL,  -- the key of the run that ordered it
    state            expedite_state NOT NULL,
    amount           integer        NOT NULL,
    slot_reference   text,
    charge_reference text,
    refusal_code     text,
    created_at       timestamptz    NOT NULL,
    updated_at       timestamptz    NOT NULL,
    CHECK ((state = 'confirmed') = (slot_reference IS NOT NULL AND charge_reference IS NOT NULL)),
    CHECK ((state = 'refused') = (refusal_code IS NOT NULL))
);
