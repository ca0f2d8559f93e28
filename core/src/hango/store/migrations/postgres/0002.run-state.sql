-- depends: 0001.base
-- Todos and serialisable middleware state, so a resumed run keeps its plan.
ALTER TABLE runs ADD COLUMN state_json jsonb NOT NULL DEFAULT '{}';
