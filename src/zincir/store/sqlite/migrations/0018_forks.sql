-- Where a run came from: a fork (or a rewind) holds its source's history before at_seq and
-- continues live from it. One row per forked run; pruning the fork deletes its row, pruning
-- the source leaves its forks' rows (they keep the source's id as a name). No foreign key to
-- agent_runs: a source may be pruned while its forks live on.
CREATE TABLE run_origins (
    run_id        TEXT PRIMARY KEY,
    source_run_id TEXT NOT NULL,
    at_seq        INTEGER NOT NULL CHECK (at_seq >= 1),
    kind          TEXT NOT NULL CHECK (kind IN ('fork', 'rewind')),
    created_at    TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX run_origins_source ON run_origins (source_run_id, created_at);
