-- Where a run came from: a fork (or a rewind) holds its source's history before at_seq and
-- continues live from it. One row per forked run; pruning the fork deletes its row, pruning
-- the source leaves its forks' rows (they keep the source's id as a name). No foreign key to
-- agent_runs: a source may be pruned while its forks live on.
CREATE TABLE run_origins (
    run_id        text PRIMARY KEY,
    source_run_id text NOT NULL,
    at_seq        bigint NOT NULL CHECK (at_seq >= 1),
    kind          text NOT NULL CHECK (kind IN ('fork', 'rewind')),
    created_at    timestamptz NOT NULL
);
CREATE INDEX run_origins_source ON run_origins (source_run_id, created_at);
