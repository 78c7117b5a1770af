-- Restart checkpoints: how far application code consumed a run's replay, one row per
-- (run id, checkpoint id) whose revision only moves forward. No foreign key to agent_runs:
-- the run id here need not name a zincir run (an application may checkpoint a replay it
-- drives itself), and removing a run must not fail over its checkpoints. A rowid table, so
-- a payload of up to a MiB sits in its own overflow pages, away from the key index.
CREATE TABLE restart_checkpoints (
    run_id        TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL,
    revision      INTEGER NOT NULL CHECK (revision >= 0),
    payload       TEXT NOT NULL,
    updated_at    TEXT NOT NULL,
    PRIMARY KEY (run_id, checkpoint_id)
);
