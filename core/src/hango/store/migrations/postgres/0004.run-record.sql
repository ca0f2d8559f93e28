-- depends: 0003.run-queue
-- What a run was started with (config_json: its middleware stack with each middleware's
-- distribution and version, and its model), so resume and workers rebuild exactly that; and
-- the status 'suspended' (a run waiting for a human decision).
ALTER TABLE runs ADD COLUMN config_json jsonb NOT NULL DEFAULT '{}';
ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check
    CHECK (status IN ('queued', 'running', 'completed', 'failed', 'cancelled', 'suspended'));
