ALTER TABLE runs DROP CONSTRAINT runs_lease_kind;
ALTER TABLE runs DROP COLUMN lease_kind;
