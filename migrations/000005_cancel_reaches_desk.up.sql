-- A cancel reaches the review desk. A delivery never tried when its request
-- is cancelled is withdrawn by the cancel's own statement (the desk is never
-- called); one that may already be at the desk gets a second outbox row of
-- kind 'cancel', which the dispatcher hands the desk under the key
-- demo-request:<request_id>:cancel (delivery.CancelKey), with the same rules
-- as a submission. So the outbox is keyed by the request and the kind.
--
-- ADD VALUE may run in the migration's transaction as long as nothing in it
-- uses the new value (PostgreSQL 12 and later).
ALTER TYPE delivery_state ADD VALUE 'withdrawn';

CREATE TYPE outbox_kind AS ENUM ('submit', 'cancel');

ALTER TABLE outbox
    ADD COLUMN kind outbox_kind NOT NULL DEFAULT 'submit',
    DROP CONSTRAINT outbox_pkey,
    ADD PRIMARY KEY (request_id, kind);
