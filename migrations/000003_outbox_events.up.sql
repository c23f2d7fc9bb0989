-- Every outbox row is one event of its request, of a kind its operation
-- names. kind is plain text, so an operation with an event of its own needs
-- no change here. position numbers a request's events in the order their
-- statements queued them (1 for the submission), and the dispatcher hands
-- them to the desk in that order (outbox_take_due.sql). Two transitions of
-- a request wait for each other on its row; one whose statement began before
-- the other committed takes the same position and fails on the unique index,
-- and is decided again.
ALTER TABLE outbox ALTER COLUMN kind DROP DEFAULT,
    ALTER COLUMN kind TYPE text COLLATE "C",
    ALTER COLUMN kind SET DEFAULT 'submit';
DROP TYPE outbox_kind;
ALTER TABLE outbox ADD COLUMN position integer NOT NULL DEFAULT 1;
UPDATE outbox o SET position = n.position
FROM (SELECT request_id, kind, seq,
             row_number() OVER (PARTITION BY request_id ORDER BY kind <> 'submit', created_at, seq) AS position
      FROM outbox) n
WHERE o.request_id = n.request_id AND o.kind = n.kind AND o.seq = n.seq;
CREATE UNIQUE INDEX outbox_position ON outbox (request_id, actor_id, position);
