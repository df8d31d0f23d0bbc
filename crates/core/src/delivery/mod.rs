//! Webhook delivery's pure parts: the retry schedule, what follows an attempt, the
//! ledger of attempts, signing and which events are settled. The worker and sender are
//! in flowline-delivery.

pub mod after_attempt;
pub mod lane;
pub mod ledger;
pub mod outbox;
pub mod ready;
pub mod schedule;
pub mod settled;
pub mod signing;
pub mod signing_secrets;
pub mod undelivered;
pub mod unseen;
