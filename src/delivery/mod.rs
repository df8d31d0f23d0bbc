//! Webhook event delivery: signing, the retry schedule, the destination guard,
//! and (to come) the durable outbox and the worker.

pub mod schedule;
pub mod signing;
pub mod ssrf;
