-- depends: 0002.run-state
-- The queue: a worker claims a queued run, or a running one whose lease expired, with
-- SELECT ... FOR UPDATE SKIP LOCKED and holds it under a lease it renews. lease_token is new
-- on every claim, so only the current holder can renew or release; attempts counts claims.
ALTER TABLE runs
    ADD COLUMN lease_owner text,
    ADD COLUMN lease_token uuid,
    ADD COLUMN lease_expires_at timestamptz,
    ADD COLUMN attempts integer NOT NULL DEFAULT 0;
CREATE INDEX runs_claimable ON runs (tenant_id, created_at)
    WHERE status IN ('queued', 'running', 'cancelled');

-- Idle workers LISTEN on their tenant's channel instead of polling. A trigger sends the
-- notification, so every way a run becomes queued (submit, a worker's release) wakes them.
CREATE FUNCTION hango_notify_run_queued() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('hango_runs_' || replace(NEW.tenant_id::text, '-', ''), '');
    RETURN NULL;
END
$$;
CREATE TRIGGER runs_queued_notify
    AFTER INSERT OR UPDATE OF status ON runs
    FOR EACH ROW WHEN (NEW.status = 'queued')
    EXECUTE FUNCTION hango_notify_run_queued();
