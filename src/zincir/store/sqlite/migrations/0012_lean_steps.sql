-- A step's row holds only its claim and, once it finished, the seq of its step_completed
-- event, which carries the result: the result is stored once, and finishing a step writes
-- a pointer into a row that never grows. The view `steps` keeps the former columns.
CREATE TABLE step_claims (
    run_id      TEXT NOT NULL REFERENCES agent_runs(id),
    name        TEXT NOT NULL,
    claim_owner TEXT,
    claim_token INTEGER,
    event_seq   INTEGER,
    started_at  TEXT NOT NULL,
    PRIMARY KEY (run_id, name)
) WITHOUT ROWID;

-- Each completed step's event, live or archived; a completed step whose event is missing
-- fails the migration here (event_of_completed_step NOT NULL), and the database stays as it was.
CREATE TABLE zincir_step_moves (
    run_id                  TEXT NOT NULL,
    name                    TEXT NOT NULL,
    event_of_completed_step INTEGER NOT NULL,
    result                  TEXT NOT NULL,
    PRIMARY KEY (run_id, event_of_completed_step)
) WITHOUT ROWID;
INSERT INTO zincir_step_moves (run_id, name, event_of_completed_step, result)
SELECT s.run_id, s.name, coalesce(
    (SELECT max(e.seq) FROM events AS e WHERE e.run_id = s.run_id
     AND e.type = 'step_completed' AND e.payload ->> '$.name' = s.name),
    (SELECT max(a.seq) FROM archived_events AS a WHERE a.run_id = s.run_id
     AND a.type = 'step_completed' AND a.payload ->> '$.name' = s.name)), s.result
FROM steps AS s WHERE s.status = 'completed';

UPDATE events SET payload = json_object('name', m.name, 'result', json(m.result))
FROM zincir_step_moves AS m
WHERE events.run_id = m.run_id AND events.seq = m.event_of_completed_step;
UPDATE archived_events SET payload = json_object('name', m.name, 'result', json(m.result))
FROM zincir_step_moves AS m
WHERE archived_events.run_id = m.run_id
  AND archived_events.seq = m.event_of_completed_step;

INSERT INTO step_claims (run_id, name, claim_owner, claim_token, event_seq, started_at)
SELECT s.run_id, s.name, s.claim_owner, s.claim_token, m.event_of_completed_step, s.started_at
FROM steps AS s LEFT JOIN zincir_step_moves AS m ON m.run_id = s.run_id AND m.name = s.name;

DROP TABLE zincir_step_moves;
DROP TABLE steps;

CREATE VIEW steps (run_id, name, status, claim_owner, claim_token, result, started_at,
                   completed_at) AS
SELECT c.run_id, c.name,
       CASE WHEN c.event_seq IS NULL THEN 'running' ELSE 'completed' END,
       c.claim_owner, c.claim_token,
       coalesce(e.payload, a.payload) -> '$.result',
       c.started_at,
       coalesce(e.created_at, a.created_at)
FROM step_claims AS c
LEFT JOIN events AS e ON e.run_id = c.run_id AND e.seq = c.event_seq
LEFT JOIN archived_events AS a
    ON e.seq IS NULL AND a.run_id = c.run_id AND a.seq = c.event_seq;
