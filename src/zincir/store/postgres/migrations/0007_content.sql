-- Content stored once: the pieces of operation inputs (messages, tool definitions, large
-- values) and the nodes chaining them, each kept once per schema by its SHA-256, and which
-- runs refer to each (a prune deletes what no run refers to any more). An operation row
-- whose input has pieces keeps its description in input_parts and '' in input_json; every
-- record written from now on holds null for its input, put back on read.
CREATE TABLE content (
    hash text PRIMARY KEY,
    body text NOT NULL
);
CREATE TABLE content_refs (
    run_id text NOT NULL,
    hash   text NOT NULL,
    PRIMARY KEY (run_id, hash)
);
CREATE INDEX content_refs_by_hash ON content_refs (hash, run_id);
ALTER TABLE operations ADD COLUMN input_parts text;
