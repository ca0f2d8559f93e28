-- depends: 0005.durability
-- Memory (hango-memory): entries namespaced by tenant and agent name, agent-wide (session_id
-- '') or for one session; every write is a row of memory_versions with its provenance, whose
-- id orders every write of a namespace (the revision a run saw). write_key makes a write
-- repeatable: a tool call replayed after a crash finds its own row instead of writing again.
CREATE TABLE memory_entries (
    tenant_id TEXT NOT NULL,
    agent TEXT NOT NULL,
    session_id TEXT NOT NULL DEFAULT '',
    key TEXT NOT NULL,
    content TEXT NOT NULL,
    version INTEGER NOT NULL,
    deleted INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (tenant_id, agent, session_id, key)
);
CREATE TABLE memory_versions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id TEXT NOT NULL,
    agent TEXT NOT NULL,
    session_id TEXT NOT NULL DEFAULT '',
    key TEXT NOT NULL,
    version INTEGER NOT NULL,
    content TEXT,
    write_key TEXT NOT NULL,
    run_id TEXT,
    tool_call_id TEXT,
    actor TEXT NOT NULL,
    written_at TEXT NOT NULL,
    UNIQUE (tenant_id, write_key)
);
CREATE INDEX memory_versions_key ON memory_versions (tenant_id, agent, session_id, key, version);
