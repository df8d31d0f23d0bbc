//! Hostile-tenant tests: nesting.
