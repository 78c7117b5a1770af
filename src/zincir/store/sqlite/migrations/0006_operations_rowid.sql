-- Operation rows hold whole input and record documents, often kilobytes each. In the
-- WITHOUT ROWID table of 0001 such rows live in the primary-key b-tree itself, so every
-- claim and every finish rewrote and rebalanced pages full of other rows' documents. A
-- rowid table keeps each document in its own overflow chain, and the unique index on the
-- identity holds only the key.
CREATE TABLE operations_by_rowid (
    run_id            TEXT NOT NULL,
    step_id           TEXT NOT NULL,
    sequence          INTEGER NOT NULL,
    kind              TEXT NOT NULL,
    handler_id        TEXT NOT NULL,
    input_digest      TEXT NOT NULL,
    input_json        TEXT NOT NULL,
    status            TEXT NOT NULL CHECK (status IN ('claimed', 'completed')),
    outcome           TEXT CHECK (outcome IN ('success', 'failure', 'suspended')),
    record            TEXT,
    claim_owner       TEXT,
    claim_expires_at  TEXT,
    attempts          INTEGER NOT NULL DEFAULT 0,
    created_at        TEXT NOT NULL,
    updated_at        TEXT NOT NULL,
    completed_at      TEXT,
    claim_lease_owner TEXT,
    claim_lease_token INTEGER
);

INSERT INTO operations_by_rowid (
    run_id, step_id, sequence, kind, handler_id, input_digest, input_json, status, outcome,
    record, claim_owner, claim_expires_at, attempts, created_at, updated_at, completed_at,
    claim_lease_owner, claim_lease_token)
SELECT
    run_id, step_id, sequence, kind, handler_id, input_digest, input_json, status, outcome,
    record, claim_owner, claim_expires_at, attempts, created_at, updated_at, completed_at,
    claim_lease_owner, claim_lease_token
FROM operations
ORDER BY run_id, step_id, sequence;

DROP TABLE operations;
ALTER TABLE operations_by_rowid RENAME TO operations;
CREATE UNIQUE INDEX operations_identity ON operations (run_id, step_id, sequence);
