//! Hostile-tenant tests: ratelimit.
