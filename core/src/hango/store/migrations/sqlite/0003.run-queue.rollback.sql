DROP INDEX runs_claimable;
ALTER TABLE runs DROP COLUMN attempts;
ALTER TABLE runs DROP COLUMN lease_expires_at;
ALTER TABLE runs DROP COLUMN lease_token;
ALTER TABLE runs DROP COLUMN lease_owner;
