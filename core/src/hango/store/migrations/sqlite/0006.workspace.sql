-- depends: 0005.durability
-- Workspace file contents (hango-filesystem's store backend), per session, by SHA-256. The
-- path -> digest manifest is the middleware's session-scoped private state, saved with the
-- tool result that changed it; a row here is reachable only through a saved manifest.
CREATE TABLE workspace_blobs (
    tenant_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    digest TEXT NOT NULL,
    size INTEGER NOT NULL,
    content BLOB NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (tenant_id, session_id, digest)
);
