-- The zincir schema on PostgreSQL: the same tables as the SQLite store, in the schema that
-- comes first on the connection's search_path. Times are timestamptz, judged by the
-- database's clock through zincir_now(); JSON documents are text, stored byte for byte
-- (their digests are over those bytes, so jsonb's re-encoding would break them).

-- The database's clock, unless a test pinned it for the transaction with
-- set_config('zincir.now', <timestamptz text>, true).
CREATE FUNCTION zincir_now() RETURNS timestamptz
LANGUAGE sql VOLATILE AS $$
    SELECT coalesce(nullif(current_setting('zincir.now', true), '')::timestamptz,
                    transaction_timestamp())
$$;

CREATE TABLE agent_runs (
    id               text PRIMARY KEY,
    parent_id        text REFERENCES agent_runs(id),
    spawn_name       text,
    name             text NOT NULL,
    status           text NOT NULL
                     CHECK (status IN ('pending', 'running', 'completed', 'failed', 'cancelled')),
    provider         text NOT NULL DEFAULT '',
    config           text NOT NULL DEFAULT '{}',
    result           text,
    lease_owner      text,
    lease_token      bigint NOT NULL DEFAULT 0,
    lease_expires_at timestamptz,
    last_seq         bigint NOT NULL DEFAULT 0,
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz,
    last_error       text,
    wait_kind        text CHECK (wait_kind IS NULL OR wait_kind IN ('timer', 'message', 'child')),
    wait_ref         text,       -- timer name, message topic or child run id
    wait_until       timestamptz, -- wake time or receive deadline, if any
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL
);
CREATE INDEX agent_runs_live ON agent_runs (status) WHERE status IN ('pending', 'running');
CREATE INDEX agent_runs_children ON agent_runs (parent_id) WHERE parent_id IS NOT NULL;
CREATE UNIQUE INDEX agent_runs_spawn ON agent_runs (parent_id, spawn_name)
    WHERE spawn_name IS NOT NULL;
CREATE INDEX agent_runs_recent ON agent_runs (created_at DESC, id);

CREATE TABLE events (
    run_id       text NOT NULL REFERENCES agent_runs(id),
    seq          bigint NOT NULL,
    type         text NOT NULL,
    payload      text NOT NULL,
    created_at   timestamptz NOT NULL,
    tool_call_id text,
    PRIMARY KEY (run_id, seq)
);
CREATE UNIQUE INDEX events_one_intent ON events (run_id, tool_call_id) WHERE type = 'tool_call';
CREATE UNIQUE INDEX events_one_result ON events (run_id, tool_call_id)
    WHERE type = 'tool_result';

-- Tool intents still waiting for their result (an intent leaves when its tool_result is
-- recorded, in the same transaction).
CREATE TABLE open_intents (
    run_id       text NOT NULL,
    tool_call_id text NOT NULL,
    seq          bigint NOT NULL,
    PRIMARY KEY (run_id, tool_call_id)
);

CREATE TABLE checkpoints (
    id           bigserial PRIMARY KEY,
    run_id       text NOT NULL REFERENCES agent_runs(id),
    round        integer NOT NULL,
    status       text NOT NULL CHECK (status IN ('proposed', 'accepted', 'rejected')),
    state        text NOT NULL,
    evidence     text,
    lineage_seq  bigint NOT NULL,
    proposed_seq bigint NOT NULL,
    decided_seq  bigint,
    created_at   timestamptz NOT NULL,
    decided_at   timestamptz,
    UNIQUE (run_id, round)
);

CREATE TABLE steps (
    run_id       text NOT NULL REFERENCES agent_runs(id),
    name         text NOT NULL,
    status       text NOT NULL CHECK (status IN ('running', 'completed')),
    claim_owner  text,
    claim_token  bigint,
    result       text,
    started_at   timestamptz NOT NULL,
    completed_at timestamptz,
    PRIMARY KEY (run_id, name)
);

CREATE TABLE timers (
    run_id       text NOT NULL REFERENCES agent_runs(id),
    name         text NOT NULL,
    wake_at      timestamptz NOT NULL,
    completed_at timestamptz,
    created_at   timestamptz NOT NULL,
    PRIMARY KEY (run_id, name)
);
CREATE INDEX timers_due ON timers (wake_at) WHERE completed_at IS NULL;

CREATE TABLE messages (
    id           bigserial PRIMARY KEY,
    to_run_id    text NOT NULL,
    topic        text NOT NULL,
    payload      text NOT NULL,
    from_run_id  text,
    send_key     text,
    created_at   timestamptz NOT NULL,
    received_by  text,
    received_at  timestamptz
);
CREATE INDEX messages_inbox ON messages (to_run_id, topic, id) WHERE received_at IS NULL;
CREATE UNIQUE INDEX messages_once ON messages (from_run_id, send_key)
    WHERE send_key IS NOT NULL;
CREATE UNIQUE INDEX messages_received ON messages (to_run_id, received_by)
    WHERE received_by IS NOT NULL;
CREATE UNIQUE INDEX messages_once_external ON messages (to_run_id, send_key)
    WHERE from_run_id IS NULL AND send_key IS NOT NULL;
CREATE INDEX messages_to ON messages (to_run_id, id);
CREATE INDEX messages_from ON messages (from_run_id, id) WHERE from_run_id IS NOT NULL;

CREATE TABLE operations (
    run_id            text NOT NULL,
    step_id           text NOT NULL,
    sequence          bigint NOT NULL,
    kind              text NOT NULL,
    handler_id        text NOT NULL,
    input_digest      text NOT NULL,
    input_json        text NOT NULL,
    status            text NOT NULL CHECK (status IN ('claimed', 'completed')),
    outcome           text CHECK (outcome IN ('success', 'failure', 'suspended')),
    record            text,
    claim_owner       text,
    claim_expires_at  timestamptz,
    attempts          integer NOT NULL DEFAULT 0,
    created_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL,
    completed_at      timestamptz,
    claim_lease_owner text,
    claim_lease_token bigint,
    PRIMARY KEY (run_id, step_id, sequence)
);

-- Restart checkpoints: how far application code consumed a run's replay. No foreign key:
-- the run id need not name a zincir run.
CREATE TABLE restart_checkpoints (
    run_id        text NOT NULL,
    checkpoint_id text NOT NULL,
    revision      bigint NOT NULL CHECK (revision >= 0),
    payload       text NOT NULL,
    updated_at    timestamptz NOT NULL,
    PRIMARY KEY (run_id, checkpoint_id)
);

-- Approvals a person answers later: one row per paused call of a durable run.
CREATE TABLE approvals (
    approval_id  text PRIMARY KEY,            -- RUN/CALL, '%' and '/' escaped in each part
    run_id       text NOT NULL REFERENCES agent_runs(id),
    call_id      text NOT NULL,
    tool         text NOT NULL,
    arguments    text NOT NULL,               -- JSON object
    args_sha256  text NOT NULL,
    sequence     bigint NOT NULL,
    execution    text NOT NULL CHECK (execution IN ('approval', 'external')),
    requested_at timestamptz NOT NULL,
    expires_at   timestamptz,                 -- NULL: never expires
    decision     text,                        -- ApprovalDecision JSON; NULL: still undecided
    decided_at   timestamptz,
    UNIQUE (run_id, call_id)
);
CREATE INDEX approvals_pending ON approvals (requested_at, approval_id) WHERE decision IS NULL;

-- LangGraph checkpoints (zincir.integrations.langgraph); thread ids are LangGraph's.
-- Serialized values are (type, bytes): 'json', 'msgpack', 'null' or 'bytes'; never 'pickle'.
-- Ids compare byte-wise (COLLATE "C", like SQLite), so ORDER BY checkpoint_id uses the key.
CREATE TABLE langgraph_checkpoints (
    thread_id            text COLLATE "C" NOT NULL,
    checkpoint_ns        text COLLATE "C" NOT NULL DEFAULT '',
    checkpoint_id        text COLLATE "C" NOT NULL,
    parent_checkpoint_id text,
    run_id               text,
    type                 text NOT NULL,
    checkpoint           bytea NOT NULL,
    metadata             text NOT NULL,
    created_at           timestamptz NOT NULL,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
);
CREATE INDEX langgraph_checkpoints_run ON langgraph_checkpoints (run_id)
    WHERE run_id IS NOT NULL;

CREATE TABLE langgraph_writes (
    thread_id     text COLLATE "C" NOT NULL,
    checkpoint_ns text COLLATE "C" NOT NULL DEFAULT '',
    checkpoint_id text COLLATE "C" NOT NULL,
    task_id       text COLLATE "C" NOT NULL,
    idx           integer NOT NULL,
    channel       text NOT NULL,
    type          text NOT NULL,
    value         bytea NOT NULL,
    task_path     text COLLATE "C" NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
);

CREATE TABLE langgraph_thread_leases (
    thread_id  text PRIMARY KEY,
    owner      text,
    token      bigint NOT NULL CHECK (token > 0),
    expires_at timestamptz,
    updated_at timestamptz NOT NULL
);
