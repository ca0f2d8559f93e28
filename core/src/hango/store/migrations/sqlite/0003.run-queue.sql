-- depends: 0002.run-state
-- The queue: a worker claims a queued run, or a running one whose lease expired, and holds it
-- under a lease it renews. lease_token is new on every claim, so only the current holder can
-- renew or release; attempts counts claims. lease_expires_at is an ISO 8601 UTC timestamp
-- with microseconds, so it compares as text.
ALTER TABLE runs ADD COLUMN lease_owner TEXT;
ALTER TABLE runs ADD COLUMN lease_token TEXT;
ALTER TABLE runs ADD COLUMN lease_expires_at TEXT;
ALTER TABLE runs ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
CREATE INDEX runs_claimable ON runs (tenant_id, created_at)
    WHERE status IN ('queued', 'running', 'cancelled');
