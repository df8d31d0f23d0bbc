//! Hostile-tenant tests: egress.
