-- Events that compaction moved out of the live log: those at or before a run's latest
-- accepted checkpoint, except tool intents still waiting for their result. Readers of a
-- run's whole log read both tables merged by seq; state() reads only what follows the
-- checkpoint, which compaction never moves.
CREATE TABLE archived_events (
    run_id       text NOT NULL,
    seq          bigint NOT NULL,
    type         text NOT NULL,
    payload      text NOT NULL,
    created_at   timestamptz NOT NULL,
    tool_call_id text,
    PRIMARY KEY (run_id, seq)
);
CREATE UNIQUE INDEX archived_one_intent ON archived_events (run_id, tool_call_id)
    WHERE type = 'tool_call';

-- A tool call id stays used once its intent is archived: a new intent reusing it is refused
-- like one the live log still holds (unique_violation, as the live index raises).
CREATE FUNCTION zincir_intent_not_archived() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM archived_events
               WHERE run_id = NEW.run_id AND type = 'tool_call'
                 AND tool_call_id = NEW.tool_call_id) THEN
        RAISE EXCEPTION 'the tool call id % has an archived intent', NEW.tool_call_id
            USING ERRCODE = 'unique_violation', CONSTRAINT = 'events_one_intent';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER events_intent_not_archived BEFORE INSERT ON events
    FOR EACH ROW WHEN (NEW.type = 'tool_call') EXECUTE FUNCTION zincir_intent_not_archived();

-- The budget in force (the latest budget_set event's JSON; NULL: unlimited), kept on the
-- run's row by the transaction that logs it, so a reader need not scan the log for it.
ALTER TABLE agent_runs ADD COLUMN budget text;
