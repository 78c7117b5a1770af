-- Wake-ups: a NOTIFY on channel 'zincir_' || the first 16 hex digits of md5(schema) (a
-- channel name must stay under 64 bytes, a schema name need not), sent at COMMIT, whenever something a
-- waiter polls for may have become true. The payload is the run id to wake: a message's
-- recipient; the parent of a run that became terminal (its join); a run whose lease was
-- released or that was created unowned (ResumeWorkers). Waiters still poll as a fallback,
-- so a lost notification only costs latency.

CREATE FUNCTION zincir_wake() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    channel text := 'zincir_' || left(md5(TG_TABLE_SCHEMA), 16);
BEGIN
    IF TG_TABLE_NAME = 'messages' THEN
        PERFORM pg_notify(channel, NEW.to_run_id);
    ELSIF NEW.status IN ('completed', 'failed', 'cancelled') THEN
        PERFORM pg_notify(channel, coalesce(NEW.parent_id, NEW.id));
    ELSE
        PERFORM pg_notify(channel, NEW.id);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER messages_wake AFTER INSERT ON messages
    FOR EACH ROW EXECUTE FUNCTION zincir_wake();
CREATE TRIGGER runs_created_wake AFTER INSERT ON agent_runs
    FOR EACH ROW WHEN (NEW.lease_owner IS NULL) EXECUTE FUNCTION zincir_wake();
CREATE TRIGGER runs_wake AFTER UPDATE OF status, lease_owner ON agent_runs
    FOR EACH ROW WHEN (NEW.lease_owner IS NULL OR NEW.status IS DISTINCT FROM OLD.status)
    EXECUTE FUNCTION zincir_wake();
