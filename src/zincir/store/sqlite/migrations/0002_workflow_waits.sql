-- Workflow waits: what a run is blocked on while no process drives it.
-- A ResumeWorker claims a waiting run only once its wait is satisfied: the deadline has
-- passed, a message arrived on the awaited topic, or the awaited child run is terminal.

ALTER TABLE agent_runs ADD COLUMN wait_kind TEXT
    CHECK (wait_kind IS NULL OR wait_kind IN ('timer', 'message', 'child'));
ALTER TABLE agent_runs ADD COLUMN wait_ref TEXT;    -- timer name, message topic or child run id
ALTER TABLE agent_runs ADD COLUMN wait_until TEXT;  -- wake time or receive deadline, if any

-- One message per receive key of a run: a replayed recv() finds the message it took.
CREATE UNIQUE INDEX messages_received ON messages (to_run_id, received_by)
    WHERE received_by IS NOT NULL;
-- Keyed sends from outside any run (e.g. a human approval) are deduplicated per recipient.
CREATE UNIQUE INDEX messages_once_external ON messages (to_run_id, send_key)
    WHERE from_run_id IS NULL AND send_key IS NOT NULL;
