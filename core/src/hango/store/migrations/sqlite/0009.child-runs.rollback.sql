DROP INDEX runs_child;
ALTER TABLE runs DROP COLUMN parent_tool_call_id;
ALTER TABLE runs DROP COLUMN parent_run_id;
