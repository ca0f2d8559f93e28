-- depends: 0003.run-queue
-- What a run was started with (config_json: its middleware stack with each middleware's
-- distribution and version, and its model), so resume and workers rebuild exactly that; and
-- the status 'suspended' (a run waiting for a human decision). SQLite cannot alter a CHECK
-- constraint, so the runs table is rebuilt.
CREATE TABLE runs_new (
    tenant_id TEXT NOT NULL,
    id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    status TEXT NOT NULL
        CHECK (status IN ('queued', 'running', 'completed', 'failed', 'cancelled', 'suspended')),
    error TEXT,
    stop_reason TEXT,
    message_start INTEGER NOT NULL,
    version INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    state_json TEXT NOT NULL DEFAULT '{}',
    lease_owner TEXT,
    lease_token TEXT,
    lease_expires_at TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    config_json TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (tenant_id, id)
);
INSERT INTO runs_new (tenant_id, id, session_id, agent_id, status, error, stop_reason,
    message_start, version, created_at, updated_at, state_json, lease_owner, lease_token,
    lease_expires_at, attempts)
SELECT tenant_id, id, session_id, agent_id, status, error, stop_reason, message_start, version,
    created_at, updated_at, state_json, lease_owner, lease_token, lease_expires_at, attempts
FROM runs;
DROP TABLE runs;
ALTER TABLE runs_new RENAME TO runs;
CREATE INDEX runs_by_session ON runs (tenant_id, session_id);
CREATE INDEX runs_by_created ON runs (tenant_id, created_at);
CREATE INDEX runs_claimable ON runs (tenant_id, created_at)
    WHERE status IN ('queued', 'running', 'cancelled');
