-- agents, sessions, runs and messages; every row carries its tenant (the same tables as the
-- SQLite back end, with native types).
CREATE TABLE agents (
    tenant_id uuid NOT NULL,
    id uuid NOT NULL,
    name text NOT NULL,
    definition jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id)
);
CREATE TABLE sessions (
    tenant_id uuid NOT NULL,
    id uuid NOT NULL,
    agent_id uuid NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id)
);
CREATE TABLE runs (
    tenant_id uuid NOT NULL,
    id uuid NOT NULL,
    session_id uuid NOT NULL,
    agent_id uuid NOT NULL,
    status text NOT NULL CHECK (status IN ('queued', 'running', 'completed', 'failed', 'cancelled')),
    error text,
    stop_reason text,
    message_start integer NOT NULL,
    version bigint NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id)
);
CREATE INDEX runs_by_session ON runs (tenant_id, session_id);
CREATE INDEX runs_by_created ON runs (tenant_id, created_at);
-- json, not jsonb: history goes back to the model byte for byte (key order kept, as SQLite
-- keeps it), and it is never queried inside.
CREATE TABLE messages (
    tenant_id uuid NOT NULL,
    session_id uuid NOT NULL,
    seq integer NOT NULL,
    run_id uuid NOT NULL,
    role text NOT NULL CHECK (role IN ('user', 'assistant')),
    content json NOT NULL,
    PRIMARY KEY (tenant_id, session_id, seq)
);
