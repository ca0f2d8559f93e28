-- depends: 0004.run-record
-- write_id: the id its writer gave the last save or release of a run. A writer whose
-- connection died around COMMIT retries on a fresh connection; finding its own id there, it
-- knows the write was applied instead of taking it for another writer's.
ALTER TABLE runs ADD COLUMN write_id uuid;
-- A session's active run (the busy check of every new run in it) in one index probe, however
-- many runs the session has had.
CREATE INDEX runs_active ON runs (tenant_id, session_id)
    WHERE status IN ('queued', 'running', 'suspended');
