-- depends: 0005.durability
-- One executor per run on every path: a terminal's `hango run`, `Harness.execute` and a
-- queue worker all hold a run under a claim (lease_owner, lease_token, lease_expires_at).
-- lease_kind says whose: 'worker' (taken from the queue; a worker reclaims it once expired)
-- or 'direct' (taken by id; only another direct executor takes it over once expired, so a
-- crashed terminal run is never picked up by a worker it was not submitted to).
ALTER TABLE runs ADD COLUMN lease_kind TEXT;
UPDATE runs SET lease_kind = 'worker' WHERE lease_token IS NOT NULL;
