DROP INDEX runs_active;
