-- LangGraph checkpoints (zincir.integrations.langgraph): a thread's checkpoints per
-- (thread id, namespace, checkpoint id), the pending writes of the tasks that ran from each,
-- and the optional lease that fences a thread's writers. Thread ids are LangGraph's, not
-- zincir run ids: no foreign key to agent_runs.
--
-- Rowid tables with unique indexes on the key: a checkpoint or a write holds a serialized
-- value of any size (a whole conversation), which in a WITHOUT ROWID table would sit in the
-- key's b-tree and push it deep; here it lives in its own overflow pages and the key index
-- stays small. Serialized values are (type, bytes): 'json' is UTF-8 JSON text, 'msgpack'
-- LangGraph's msgpack, 'null' an empty value, 'bytes' raw bytes. Never 'pickle'.
--
-- langgraph_checkpoints: checkpoint_ns '' is the root graph; checkpoint_id is a uuid6, so
-- ids sort oldest to newest; parent_checkpoint_id is NULL for a thread's first; run_id is
-- metadata.run_id (for delete_for_runs); type tags the serialized checkpoint; metadata is a
-- JSON object (source, step, parents, run_id, ...).
CREATE TABLE langgraph_checkpoints (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL DEFAULT '',
    checkpoint_id TEXT NOT NULL,
    parent_checkpoint_id TEXT,
    run_id TEXT,
    type TEXT NOT NULL,
    checkpoint BLOB NOT NULL,
    metadata TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE UNIQUE INDEX langgraph_checkpoints_key
    ON langgraph_checkpoints (thread_id, checkpoint_ns, checkpoint_id);
CREATE INDEX langgraph_checkpoints_run ON langgraph_checkpoints (run_id) WHERE run_id IS NOT NULL;

-- langgraph_writes: the writes of the task task_id run from checkpoint checkpoint_id; idx is
-- the write's position in the task's list, negative for LangGraph's special channels (an
-- error, an interrupt), whose later write replaces the stored one.
CREATE TABLE langgraph_writes (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL DEFAULT '',
    checkpoint_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    channel TEXT NOT NULL,
    type TEXT NOT NULL,
    value BLOB NOT NULL,
    task_path TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL
);
CREATE UNIQUE INDEX langgraph_writes_key
    ON langgraph_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx);

-- langgraph_thread_leases: one row per thread ever leased; owner and expires_at are NULL once
-- released. The token only grows (a release keeps it), so a writer holding an older token is
-- refused even after the thread was released and taken again.
CREATE TABLE langgraph_thread_leases (
    thread_id TEXT PRIMARY KEY,
    owner TEXT,
    token INTEGER NOT NULL CHECK (token > 0),
    expires_at TEXT,
    updated_at TEXT NOT NULL
);
