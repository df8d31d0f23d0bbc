//! Hostile-tenant tests: status.
