-- Encryption at rest: a row here marks the database encrypted ('sealed'; 'sealing' while
-- `zincir reencrypt` seals a database that was plain), and each key that ever sealed keeps
-- a check value sealed with it, so a wrong key given under a known id is refused at open.
-- The triggers refusing plain values in sealed columns are created when the row is.
CREATE TABLE store_encryption (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    state      TEXT NOT NULL CHECK (state IN ('sealing', 'sealed')),
    created_at TEXT NOT NULL
);
CREATE TABLE sealing_keys (
    key_id      TEXT PRIMARY KEY,
    check_value BLOB NOT NULL,
    created_at  TEXT NOT NULL
) WITHOUT ROWID;
