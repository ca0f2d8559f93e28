ALTER TABLE runs DROP COLUMN lease_kind;
