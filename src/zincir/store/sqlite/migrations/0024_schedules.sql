-- Schedules (``runner.schedule``): a cron expression in a time zone that starts a run of
-- ``agent`` on ``prompt`` (sealed in an encrypted store) at each tick. ``since``: ticks at
-- or before it are never started (declared, changed or resumed then); ``last_tick``: the
-- last tick started, by the one transaction that created its run ``last_run_id``.
CREATE TABLE schedules (
    name        TEXT PRIMARY KEY,
    cron        TEXT NOT NULL,
    timezone    TEXT NOT NULL,
    agent       TEXT NOT NULL,
    prompt      TEXT NOT NULL,
    missed      TEXT NOT NULL CHECK (missed IN ('run_once', 'skip')),
    queue       TEXT,
    paused_at   TEXT,
    since       TEXT NOT NULL,
    last_tick   TEXT,
    last_run_id TEXT,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL
) WITHOUT ROWID;
