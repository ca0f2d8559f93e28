-- depends: 0005.durability
-- Workspace file contents (hango-filesystem's store backend), per session, by SHA-256. The
-- path -> digest manifest is the middleware's session-scoped private state, saved with the
-- tool result that changed it; a row here is reachable only through a saved manifest.
CREATE TABLE workspace_blobs (
    tenant_id uuid NOT NULL,
    session_id uuid NOT NULL,
    digest text NOT NULL,
    size bigint NOT NULL,
    content bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, session_id, digest)
);
