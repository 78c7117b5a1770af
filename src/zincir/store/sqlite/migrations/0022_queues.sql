-- Durable queues: a queue's settings (stored the first time it is used; the newest
-- declaration wins) and, on a run, the queue it waits in or ran through. A queued run waits
-- on a message that never comes (wait_ref 'zincir.queue': no claim takes it) until a
-- serving process admits it under the queue's limits (queue_started_at: when; counted by
-- the queue's rate).
CREATE TABLE queues (
    name                TEXT PRIMARY KEY,
    concurrency         INTEGER,
    concurrency_per_key INTEGER,
    rate_limit          INTEGER,
    rate_period_us      INTEGER,
    created_at          TEXT NOT NULL,
    updated_at          TEXT NOT NULL
);
ALTER TABLE agent_runs ADD COLUMN queue TEXT;
ALTER TABLE agent_runs ADD COLUMN queue_key TEXT;
ALTER TABLE agent_runs ADD COLUMN queue_priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE agent_runs ADD COLUMN queue_dedupe TEXT;
ALTER TABLE agent_runs ADD COLUMN queue_started_at TEXT;
CREATE INDEX agent_runs_queued ON agent_runs (queue, queue_priority DESC, created_at, id)
    WHERE queue IS NOT NULL AND queue_started_at IS NULL;
CREATE INDEX agent_runs_queue_live ON agent_runs (queue, queue_key)
    WHERE queue IS NOT NULL AND status IN ('pending', 'running');
CREATE INDEX agent_runs_queue_started ON agent_runs (queue, queue_started_at)
    WHERE queue_started_at IS NOT NULL;
CREATE UNIQUE INDEX agent_runs_queue_dedupe ON agent_runs (queue, queue_dedupe)
    WHERE queue_dedupe IS NOT NULL;
