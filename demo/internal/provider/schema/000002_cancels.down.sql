DROP TABLE cancels;
DROP SEQUENCE cancel_refs;
