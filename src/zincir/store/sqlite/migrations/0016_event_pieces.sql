-- An event's long strings stored once: a model's reply or a tool's result of at least 1 KiB
-- is a row of content (shared with the records and requests that hold the same text); the
-- event's payload keeps "" in its place, and payload_pieces lists [offset, digest] of each
-- such place, put back on read. Records of successful operations likewise keep a
-- description of an output holding such a string (no schema change).
ALTER TABLE events ADD COLUMN payload_pieces TEXT;
ALTER TABLE archived_events ADD COLUMN payload_pieces TEXT;
