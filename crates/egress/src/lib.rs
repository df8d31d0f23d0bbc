//! The destination guard: one policy and one HTTP client for every URL a user chooses
//! (webhook deliveries, `http.request` steps inline and in step Jobs).
//!
//! - `policy`: which addresses are refused (loopback, link-local and cloud metadata,
//!   private, CGNAT, unspecified, multicast, reserved, their IPv4-embedding IPv6 forms,
//!   `localhost` names) and the operator's `--allow-cidr` allow-list; pure.
//! - `resolver`: resolves a name and hands the connector only admitted addresses.
//! - `client`: the only constructor of a client for user-chosen URLs.
//! - `exchange`: redirects followed hop by hop through the guard, bodies read with a cap.
//!
//! Sits below `engine` and `delivery`; depends on nothing else in the crate.

pub mod client;
pub mod exchange;
pub mod policy;
mod resolver;

pub use client::{ClientSettings, GuardedClient, RequestError};
pub use policy::{CidrError, DestinationPolicy, Refusal, parse_cidr};

/// Environment variable carrying the allow-list (comma-separated) into `flowline step`;
/// also read by `flowline operator` for `--allow-cidr`.
pub const ALLOW_CIDRS_ENV: &str = "FLOWLINE_ALLOW_CIDRS";
