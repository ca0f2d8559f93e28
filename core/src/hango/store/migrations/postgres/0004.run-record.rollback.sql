-- A suspended run (which the 0003 schema cannot represent) becomes cancelled, resumable.
UPDATE runs SET status = 'cancelled' WHERE status = 'suspended';
ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check
    CHECK (status IN ('queued', 'running', 'completed', 'failed', 'cancelled'));
ALTER TABLE runs DROP COLUMN config_json;
