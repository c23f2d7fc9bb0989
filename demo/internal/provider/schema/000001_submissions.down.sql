DROP TABLE submissions;
DROP SEQUENCE submission_refs;
