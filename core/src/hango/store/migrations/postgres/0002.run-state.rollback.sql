ALTER TABLE runs DROP COLUMN state_json;
