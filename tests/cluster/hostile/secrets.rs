//! Hostile-tenant tests: secrets.
