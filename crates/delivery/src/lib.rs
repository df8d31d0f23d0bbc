//! Webhook delivery: the worker that sends each event, signed, through the destination
//! guard, and the signing secrets it reads.
#![forbid(unsafe_code)]

pub mod secrets;
pub mod sender;
pub mod worker;
