-- Schedules (``runner.schedule``): a cron expression in a time zone that starts a run of
-- ``agent`` on ``prompt`` (sealed in an encrypted store) at each tick. ``since``: ticks at
-- or before it are never started (declared, changed or resumed then); ``last_tick``: the
-- last tick started, by the one transaction that created its run ``last_run_id``.
CREATE TABLE schedules (
    name        text PRIMARY KEY,
    cron        text NOT NULL,
    timezone    text NOT NULL,
    agent       text NOT NULL,
    prompt      text NOT NULL,
    missed      text NOT NULL CHECK (missed IN ('run_once', 'skip')),
    queue       text,
    paused_at   timestamptz,
    since       timestamptz NOT NULL,
    last_tick   timestamptz,
    last_run_id text,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL
);
