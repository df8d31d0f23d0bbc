//! The HTTP parts every resource shares: the error type and its body, the JSON body
//! extractor and validation, authentication and scopes, the middleware (authentication
//! and rate limits), client addresses, pagination, idempotency keys, and the timestamp
//! format of every view.

pub mod auth;
pub mod client_ip;
pub mod encoding;
pub mod error;
pub mod idempotency;
pub mod json;
pub mod key_index;
pub(crate) mod middleware;
pub mod pagination;
pub mod path;
pub mod places;
pub mod ratelimit;
pub mod time;
pub mod validation;
