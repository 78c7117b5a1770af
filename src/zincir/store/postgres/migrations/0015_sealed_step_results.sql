-- Encryption at rest: a step's result in the `steps` view is read from its event's payload,
-- which an encrypted store keeps sealed ('zs1:' and base64): the view gives NULL for a
-- sealed payload (the store opens the event itself) and the result as before for a plain one.
CREATE OR REPLACE VIEW steps (run_id, name, status, claim_owner, claim_token, result,
                              started_at, completed_at) AS
SELECT c.run_id, c.name,
       CASE WHEN c.event_seq IS NULL THEN 'running' ELSE 'completed' END,
       c.claim_owner, c.claim_token,
       CASE WHEN left(coalesce(e.payload, a.payload), 4) <> 'zs1:'
            THEN (coalesce(e.payload, a.payload)::json -> 'result')::text END,
       c.started_at,
       coalesce(e.created_at, a.created_at)
FROM step_claims AS c
LEFT JOIN events AS e ON e.run_id = c.run_id AND e.seq = c.event_seq
LEFT JOIN archived_events AS a
    ON e.seq IS NULL AND a.run_id = c.run_id AND a.seq = c.event_seq;
