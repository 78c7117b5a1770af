-- The lease's TTL in microseconds, set with each acquisition. The lease holder's appends
-- leave the run's row unwritten (one page less a commit): the lease then lives until the
-- newest of those appends plus this TTL, read by the queries that judge a lease.
ALTER TABLE agent_runs ADD COLUMN lease_ttl_us INTEGER;
