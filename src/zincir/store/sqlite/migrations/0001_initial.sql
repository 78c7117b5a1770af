-- The seven tables of the durability contract. Timestamps are fixed-width UTC ISO-8601 text.

CREATE TABLE agent_runs (
    id               TEXT PRIMARY KEY,
    parent_id        TEXT REFERENCES agent_runs(id),
    spawn_name       TEXT,
    name             TEXT NOT NULL,
    status           TEXT NOT NULL
                     CHECK (status IN ('pending', 'running', 'completed', 'failed', 'cancelled')),
    provider         TEXT NOT NULL DEFAULT '',
    config           TEXT NOT NULL DEFAULT '{}',
    result           TEXT,
    lease_owner      TEXT,
    lease_token      INTEGER NOT NULL DEFAULT 0,
    lease_expires_at TEXT,
    last_seq         INTEGER NOT NULL DEFAULT 0,
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  TEXT,
    last_error       TEXT,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL
);
-- No index covers lease_expires_at or updated_at: every write extends the lease, and an
-- index on it would add a page to every commit. Claims scan the live runs instead.
CREATE INDEX agent_runs_live ON agent_runs (status) WHERE status IN ('pending', 'running');
CREATE INDEX agent_runs_children ON agent_runs (parent_id) WHERE parent_id IS NOT NULL;
CREATE UNIQUE INDEX agent_runs_spawn ON agent_runs (parent_id, spawn_name)
    WHERE spawn_name IS NOT NULL;

CREATE TABLE events (
    run_id       TEXT NOT NULL REFERENCES agent_runs(id),
    seq          INTEGER NOT NULL,
    type         TEXT NOT NULL,
    payload      TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    tool_call_id TEXT,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
CREATE UNIQUE INDEX events_one_intent ON events (run_id, tool_call_id)
    WHERE type = 'tool_call';
CREATE UNIQUE INDEX events_one_result ON events (run_id, tool_call_id)
    WHERE type = 'tool_result';

CREATE TABLE checkpoints (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id       TEXT NOT NULL REFERENCES agent_runs(id),
    round        INTEGER NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('proposed', 'accepted', 'rejected')),
    state        TEXT NOT NULL,
    evidence     TEXT,
    lineage_seq  INTEGER NOT NULL,
    proposed_seq INTEGER NOT NULL,
    decided_seq  INTEGER,
    created_at   TEXT NOT NULL,
    decided_at   TEXT,
    UNIQUE (run_id, round)
);

CREATE TABLE steps (
    run_id       TEXT NOT NULL REFERENCES agent_runs(id),
    name         TEXT NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('running', 'completed')),
    claim_owner  TEXT,
    claim_token  INTEGER,
    result       TEXT,
    started_at   TEXT NOT NULL,
    completed_at TEXT,
    PRIMARY KEY (run_id, name)
) WITHOUT ROWID;

CREATE TABLE timers (
    run_id       TEXT NOT NULL REFERENCES agent_runs(id),
    name         TEXT NOT NULL,
    wake_at      TEXT NOT NULL,
    completed_at TEXT,
    created_at   TEXT NOT NULL,
    PRIMARY KEY (run_id, name)
) WITHOUT ROWID;
CREATE INDEX timers_due ON timers (wake_at) WHERE completed_at IS NULL;

CREATE TABLE messages (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    to_run_id    TEXT NOT NULL,
    topic        TEXT NOT NULL,
    payload      TEXT NOT NULL,
    from_run_id  TEXT,
    send_key     TEXT,
    created_at   TEXT NOT NULL,
    received_by  TEXT,
    received_at  TEXT
);
CREATE INDEX messages_inbox ON messages (to_run_id, topic, id) WHERE received_at IS NULL;
CREATE UNIQUE INDEX messages_once ON messages (from_run_id, send_key)
    WHERE send_key IS NOT NULL;

CREATE TABLE operations (
    run_id           TEXT NOT NULL,
    step_id          TEXT NOT NULL,
    sequence         INTEGER NOT NULL,
    kind             TEXT NOT NULL,
    handler_id       TEXT NOT NULL,
    input_digest     TEXT NOT NULL,
    input_json       TEXT NOT NULL,
    status           TEXT NOT NULL CHECK (status IN ('claimed', 'completed')),
    outcome          TEXT CHECK (outcome IN ('success', 'failure', 'suspended')),
    record           TEXT,
    claim_owner      TEXT,
    claim_expires_at TEXT,
    attempts         INTEGER NOT NULL DEFAULT 0,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL,
    completed_at     TEXT,
    PRIMARY KEY (run_id, step_id, sequence)
) WITHOUT ROWID;
