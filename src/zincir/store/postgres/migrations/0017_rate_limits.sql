-- Provider rate limits shared by every process using a key (zincir.RateLimit): each key's
-- buckets as the time each is next full of its budget (requests_at, tokens_at: a request
-- reserves its slot by pushing them on), and blocked_until, set by a provider's 429 with
-- Retry-After for everyone. Not a run's table: keys outlive runs.
CREATE TABLE rate_limits (
    key           text PRIMARY KEY,
    requests_at   timestamptz,
    tokens_at     timestamptz,
    blocked_until timestamptz,
    updated_at    timestamptz NOT NULL
);
