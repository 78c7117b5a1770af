-- A run's durable stream: the items a client reads from an offset (``zincir.streams``).
-- ``seq`` is the offset, 1, 2, 3 ... per run, gapless when written (compaction may later
-- drop the deltas of finished model requests); a keyed item is stored once per run, so a
-- replay that appends it again appends nothing. No foreign key to agent_runs: every append
-- is fenced by the run's lease, and pruning a run deletes its items with it.
CREATE TABLE stream_items (
    run_id     TEXT NOT NULL,
    seq        INTEGER NOT NULL CHECK (seq > 0),
    kind       TEXT NOT NULL,
    item_key   TEXT,
    payload    TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
CREATE UNIQUE INDEX stream_items_key ON stream_items (run_id, item_key)
    WHERE item_key IS NOT NULL;

-- The OpenTelemetry trace of a run (its W3C traceparent), so that every process that
-- executes the run continues one trace.
CREATE TABLE run_traces (
    run_id      TEXT PRIMARY KEY,
    traceparent TEXT NOT NULL,
    created_at  TEXT NOT NULL
) WITHOUT ROWID;
