-- The lease's TTL in microseconds, set with each acquisition, as SQLite's row keeps it
-- (where the lease holder's appends leave the row unwritten and the lease lives until the
-- newest of them plus this TTL): one statement sets a lease on both backends.
ALTER TABLE agent_runs ADD COLUMN lease_ttl_us bigint;
