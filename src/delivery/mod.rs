//! Webhook event delivery: the outbox read from Runs and Workflows, the
//! acknowledgement ledger, signing, the retry schedule, the HTTPS sender (through the
//! destination guard of `crate::egress`) and the worker that ties them together.

pub mod lane;
pub mod ledger;
pub mod outbox;
pub mod ready;
pub mod schedule;
pub mod secrets;
pub mod sender;
pub mod settled;
pub mod signing;
pub mod unseen;
pub mod worker;
