DROP TABLE expedites;
DROP TYPE expedite_state;
DROP TABLE runs;
DROP TYPE run_state;
