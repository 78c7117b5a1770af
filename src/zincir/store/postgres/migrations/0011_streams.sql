-- A run's durable stream: the items a client reads from an offset (``zincir.streams``).
-- ``seq`` is the offset, 1, 2, 3 ... per run, gapless when written (compaction may later
-- drop the deltas of finished model requests); a keyed item is stored once per run, so a
-- replay that appends it again appends nothing. No foreign key to agent_runs: every append
-- is fenced by the run's lease, and pruning a run deletes its items with it.
CREATE TABLE stream_items (
    run_id     text NOT NULL,
    seq        bigint NOT NULL CHECK (seq > 0),
    kind       text NOT NULL,
    item_key   text,
    payload    text NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (run_id, seq)
);
CREATE UNIQUE INDEX stream_items_key ON stream_items (run_id, item_key)
    WHERE item_key IS NOT NULL;

-- Readers waiting on a run's stream wake at COMMIT of an append: one notification per run
-- and statement (PostgreSQL folds equal notifications of one transaction), on the channel of
-- migration 0002, with the run id as its payload.
CREATE FUNCTION zincir_stream_wake() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    channel text := 'zincir_' || left(md5(TG_TABLE_SCHEMA), 16);
BEGIN
    PERFORM pg_notify(channel, run_id) FROM (SELECT DISTINCT run_id FROM appended) AS runs;
    RETURN NULL;
END
$$;

CREATE TRIGGER stream_items_wake AFTER INSERT ON stream_items
    REFERENCING NEW TABLE AS appended
    FOR EACH STATEMENT EXECUTE FUNCTION zincir_stream_wake();

-- The OpenTelemetry trace of a run (its W3C traceparent), so that every process that
-- executes the run continues one trace.
CREATE TABLE run_traces (
    run_id      text PRIMARY KEY,
    traceparent text NOT NULL,
    created_at  timestamptz NOT NULL
);
