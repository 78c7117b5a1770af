-- The run lease an operation claim was made under (NULL for a claim made without one). A
-- claim whose lease no longer holds its run (a newer token took it, it was released or
-- expired, or the run finished) can never store its record, so the run's next owner takes
-- it over at once instead of waiting for claim_expires_at.
ALTER TABLE operations ADD COLUMN claim_lease_owner TEXT;
ALTER TABLE operations ADD COLUMN claim_lease_token INTEGER;
