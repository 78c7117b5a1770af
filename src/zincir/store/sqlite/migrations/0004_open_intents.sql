-- Tool intents still waiting for their result. Derived from the event log (an intent leaves
-- when its tool_result is recorded, in the same transaction), so pending_tools() reads only
-- the open intents instead of probing every intent of a long run.
CREATE TABLE open_intents (
    run_id       TEXT NOT NULL,
    tool_call_id TEXT NOT NULL,
    seq          INTEGER NOT NULL,
    PRIMARY KEY (run_id, tool_call_id)
) WITHOUT ROWID;

INSERT INTO open_intents (run_id, tool_call_id, seq)
SELECT intent.run_id, intent.tool_call_id, intent.seq
FROM events AS intent
WHERE intent.type = 'tool_call'
  AND NOT EXISTS (
      SELECT 1 FROM events AS outcome
      WHERE outcome.run_id = intent.run_id AND outcome.type = 'tool_result'
        AND outcome.tool_call_id = intent.tool_call_id);
