DROP TRIGGER runs_queued_notify ON runs;
DROP FUNCTION hango_notify_run_queued();
DROP INDEX runs_claimable;
ALTER TABLE runs
    DROP COLUMN attempts,
    DROP COLUMN lease_expires_at,
    DROP COLUMN lease_token,
    DROP COLUMN lease_owner;
