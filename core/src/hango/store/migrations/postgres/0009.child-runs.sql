-- depends: 0005.durability
-- A sub-agent's delegation is a run of its own: the parent run and the parent's tool call it
-- answers. One child per call (the unique index): a parent resumed after a crash finds the
-- child it started instead of starting another.
ALTER TABLE runs ADD COLUMN parent_run_id uuid;
ALTER TABLE runs ADD COLUMN parent_tool_call_id text;
CREATE UNIQUE INDEX runs_child ON runs (tenant_id, parent_run_id, parent_tool_call_id)
    WHERE parent_run_id IS NOT NULL;
