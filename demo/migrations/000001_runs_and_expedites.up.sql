-- The runs: an operation of several steps (package steps) keeps a run beside
-- its key: the input it was asked, the last recovery point reached, and what
-- the other systems answered. Any runner of the key (a retry that took it
-- over, the completer) continues the run from there. Every write to a run is
-- fenced by its key's claim token (save_run.sql).
CREATE TYPE run_state AS ENUM ('running', 'compensating', 'done', 'needs_attention');

CREATE TABLE runs (
    actor_id   text COLLATE "C" NOT NULL,
    operation  text COLLATE "C" NOT NULL,
    idem_key   text COLLATE "C" NOT NULL,
    input      jsonb       NOT NULL,  -- the operation's input, as decoded
    point      text        NOT NULL,  -- the last recovery point: the last step done, '' before the first
    state      run_state   NOT NULL,
    refs       jsonb       NOT NULL,  -- the other systems' references, by step ("undo:<step>" for an undo)
    refusal    jsonb,                 -- while compensating: the answer to store once undone
    attempts   integer     NOT NULL,  -- turns taken: the first runner and each that took it over
    last_error text,
    started_at timestamptz NOT NULL,  -- its start, or an operator's resume: its limit counts from here
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

-- The expedites: an express review of a demo request, paid at the review
-- desk (package expedite). One per request.
CREATE TYPE expedite_state AS ENUM ('ordered', 'confirmed', 'refused');

CREATE TABLE expedites (
    request_id       uuid           PRIMARY KEY REFERENCES demo_requests (id),
    actor_id         text COLLATE "C" NOT NULL,
    idem_key         text COLLATE "C" NOT NULL,  -- the key of the run that ordered it
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

-- The rule between a cancel and an expedite: a cancelled request never
-- keeps a charge. A cancel is refused while the request has an expedite
-- ordered or confirmed; an expedite is ordered only while the request is
-- accepted. Both are decided on the request's own row, where two writers
-- wait for each other: the expedite's order marks the row (expedite), and
-- the trigger below lets a cancel change the row only where that mark
-- allows. The template's cancel statement knows nothing of expedites: a
-- cancel the trigger stops changes no row, so its statement rolls back
-- (idempotency.ErrEffectNotApplied) and the cancel is decided again, and
-- refused (expedite.Service.Cancel).
ALTER TABLE demo_requests ADD COLUMN expedite expedite_state;

CREATE FUNCTION keep_expedited_requests() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state = 'cancelled' AND OLD.expedite IN ('ordered', 'confirmed') THEN
        RETURN NULL; -- the row is left as it is
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER keep_expedited_requests BEFORE UPDATE OF state ON demo_requests
    FOR EACH ROW EXECUTE FUNCTION keep_expedited_requests();

-- The sweeper (the template's purge_expired_keys.sql) deletes an abandoned
-- claim past its TTL and its lease: nothing was committed under a claim of
-- the two-phase path. The key of an unfinished run is another matter: its
-- run holds what the other systems did, and the completer finishes it
-- first. This trigger keeps such a key (and so its run, which a delete
-- would cascade to); a run still at its start has done nothing and goes.
CREATE FUNCTION keep_unfinished_runs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.lease_until IS NOT NULL AND EXISTS (
        SELECT 1 FROM runs r
        WHERE r.actor_id = OLD.actor_id AND r.operation = OLD.operation AND r.idem_key = OLD.idem_key
          AND r.point <> '' AND r.state <> 'done') THEN
        RETURN NULL; -- the row is left as it is
    END IF;
    RETURN OLD;
END
$$;

CREATE TRIGGER keep_unfinished_runs BEFORE DELETE ON idempotency_keys
    FOR EACH ROW EXECUTE FUNCTION keep_unfinished_runs();
