-- depends: 0004.run-record
-- A session's active run (the busy check of every new run in it) in one index probe, however
-- many runs the session has had. (PostgreSQL's 0005 also adds write_id: SQLite has no
-- connection that can die around a COMMIT.)
CREATE INDEX runs_active ON runs (tenant_id, session_id)
    WHERE status IN ('queued', 'running', 'suspended');
