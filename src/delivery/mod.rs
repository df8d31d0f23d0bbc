//! Webhook event delivery (CONTRACT §7): the outbox read from Runs and Workflows, the
//! acknowledgement ledger, signing, the retry schedule, the destination guard, the
//! HTTPS sender and the worker that ties them together.

pub mod lane;
pub mod ledger;
pub mod outbox;
pub mod schedule;
pub mod secrets;
pub mod sender;
pub mod signing;
pub mod ssrf;
pub mod unseen;
pub mod worker;
