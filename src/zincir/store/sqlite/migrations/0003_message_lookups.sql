-- The inspector lists a run's messages in both directions; index both ends.
CREATE INDEX messages_to ON messages (to_run_id, id);
CREATE INDEX messages_from ON messages (from_run_id, id) WHERE from_run_id IS NOT NULL;
