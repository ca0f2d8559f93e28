-- depends: 0005.durability
-- Memory (hango-memory): entries namespaced by tenant and agent name, agent-wide (session_id
-- '') or for one session; every write is a row of memory_versions with its provenance, whose
-- id orders every write of a namespace (the revision a run saw). write_key makes a write
-- repeatable: a tool call replayed after a crash, or a write retried after its connection
-- died around COMMIT, finds its own row instead of writing again.
CREATE TABLE memory_entries (
    tenant_id uuid NOT NULL,
    agent text NOT NULL,
    session_id text NOT NULL DEFAULT '',
    key text NOT NULL,
    content text NOT NULL,
    version integer NOT NULL,
    deleted boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, agent, session_id, key)
);
CREATE TABLE memory_versions (
    id bigserial PRIMARY KEY,
    tenant_id uuid NOT NULL,
    agent text NOT NULL,
    session_id text NOT NULL DEFAULT '',
    key text NOT NULL,
    version integer NOT NULL,
    content text,
    write_key text NOT NULL,
    run_id uuid,
    tool_call_id text,
    actor text NOT NULL,
    written_at timestamptz NOT NULL,
    UNIQUE (tenant_id, write_key)
);
CREATE INDEX memory_versions_key ON memory_versions (tenant_id, agent, session_id, key, version);
