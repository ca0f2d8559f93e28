-- Back to the 0003 runs table: config_json is dropped, and a suspended run (which 0003 cannot
-- represent) becomes cancelled, resumable as before.
CREATE TABLE runs_old (
    tenant_id TEXT NOT NULL,
    id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('queued', 'running', 'completed', 'failed', 'cancelled')),
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
    PRIMARY KEY (tenant_id, id)
);
INSERT INTO runs_old (tenant_id, id, session_id, agent_id, status, error, stop_reason,
    message_start, version, created_at, updated_at, state_json, lease_owner, lease_token,
    lease_expires_at, attempts)
SELECT tenant_id, id, session_id, agent_id,
    CASE status WHEN 'suspended' THEN 'cancelled' ELSE status END,
    error, stop_reason, message_start, version, created_at, updated_at, state_json,
    lease_owner, lease_token, lease_expires_at, attempts
FROM runs;
DROP TABLE runs;
ALTER TABLE runs_old RENAME TO runs;
CREATE INDEX runs_by_session ON runs (tenant_id, session_id);
CREATE INDEX runs_by_created ON runs (tenant_id, created_at);
CREATE INDEX runs_claimable ON runs (tenant_id, created_at)
    WHERE status IN ('queued', 'running', 'cancelled');
