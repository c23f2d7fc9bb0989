DROP TRIGGER keep_unfinished_runs ON idempotency_keys;
DROP FUNCTION keep_unfinished_runs();
DROP TRIGGER keep_expedited_requests ON demo_requests;
DROP FUNCTION keep_expedited_requests();
ALTER TABLE demo_requests DROP COLUMN expedite;
DROP TABLE expedites;
DROP TYPE expedite_state;
DROP TABLE runs;
DROP TYPE run_state;
