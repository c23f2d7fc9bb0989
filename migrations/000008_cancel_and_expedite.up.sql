-- The rule between a cancel and an expedite of one demo request (package
-- demo): a cancelled request never keeps a charge. A cancel is refused
-- while the request has an expedite ordered or confirmed; an expedite is
-- ordered only while the request is accepted.
--
-- The two writes are decided where both must look: on the request's own
-- row. The expedite's first step marks it (expedite = 'ordered') in the
-- statement that records the order, and the cancel changes it only where
-- that mark allows. PostgreSQL makes two writers of one row wait for each
-- other and checks the second one's WHERE again on the row the first
-- committed; a condition on another table (the expedites) would be read in
-- the second one's older snapshot and miss the order that just committed.
ALTER TABLE demo_requests ADD COLUMN expedite expedite_state;

UPDATE demo_requests d SET expedite = e.state FROM expedites e WHERE e.request_id = d.id;
