-- Approvals a person answers later: one row per paused call of a durable run, opened with the
-- pause under the run's lease, decided once from any process (a web request, the CLI).
-- The decision is bound to args_sha256, the digest of the arguments that would run; a row
-- whose expires_at has passed without a decision means the call is denied.

CREATE TABLE approvals (
    approval_id  TEXT PRIMARY KEY,            -- RUN/CALL, '%' and '/' escaped in each part
    run_id       TEXT NOT NULL REFERENCES agent_runs(id),
    call_id      TEXT NOT NULL,
    tool         TEXT NOT NULL,
    arguments    TEXT NOT NULL,               -- JSON object
    args_sha256  TEXT NOT NULL,
    sequence     INTEGER NOT NULL,
    execution    TEXT NOT NULL CHECK (execution IN ('approval', 'external')),
    requested_at TEXT NOT NULL,
    expires_at   TEXT,                        -- NULL: never expires
    decision     TEXT,                        -- ApprovalDecision JSON; NULL: still undecided
    decided_at   TEXT,
    UNIQUE (run_id, call_id)
);
-- Listing what waits for a person reads only the undecided rows: decided ones accumulate
-- with every pause ever answered, and the pending list must not scan them.
CREATE INDEX approvals_pending ON approvals (requested_at, approval_id)
    WHERE decision IS NULL;
