ALTER TABLE demo_requests DROP COLUMN expedite;
