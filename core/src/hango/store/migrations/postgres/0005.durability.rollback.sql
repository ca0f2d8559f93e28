DROP INDEX runs_active;
ALTER TABLE runs DROP COLUMN write_id;
