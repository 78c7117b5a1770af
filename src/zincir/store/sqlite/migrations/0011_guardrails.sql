-- Events that compaction moved out of the live log: those at or before a run's latest
-- accepted checkpoint, except tool intents still waiting for their result. Readers of a
-- run's whole log read both tables merged by seq; state() reads only what follows the
-- checkpoint, which compaction never moves.
CREATE TABLE archived_events (
    run_id       TEXT NOT NULL,
    seq          INTEGER NOT NULL,
    type         TEXT NOT NULL,
    payload      TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    tool_call_id TEXT,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
CREATE UNIQUE INDEX archived_one_intent ON archived_events (run_id, tool_call_id)
    WHERE type = 'tool_call';

-- A tool call id stays used once its intent is archived: a new intent reusing it is refused
-- like one the live log still holds.
CREATE TRIGGER events_intent_not_archived BEFORE INSERT ON events
WHEN NEW.type = 'tool_call' AND EXISTS (
    SELECT 1 FROM archived_events
    WHERE run_id = NEW.run_id AND type = 'tool_call' AND tool_call_id = NEW.tool_call_id)
BEGIN
    SELECT RAISE(ABORT, 'UNIQUE constraint failed: the tool call id has an archived intent');
END;

-- The budget in force (the latest budget_set event's JSON; NULL: unlimited), kept on the
-- run's row by the transaction that logs it, so a reader need not scan the log for it.
ALTER TABLE agent_runs ADD COLUMN budget TEXT;
