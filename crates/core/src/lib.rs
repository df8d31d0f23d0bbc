//! Flowline's core: the custom resources (`crd`), limits, ids, the clock, and every
//! pure decision the controllers and the API make (`engine`, `delivery`, `admission`,
//! `leader`, `cron`, `triage`). No Kubernetes client, no async runtime, no HTTP: what
//! is here can be tested alone, and the crates above can only point down to it.
#![forbid(unsafe_code)]

pub mod admission;
pub mod cached_read;
pub mod clock;
pub mod crd;
pub mod cron;
pub mod delivery;
pub mod engine;
pub mod fanout;
pub mod ids;
pub mod leader;
pub mod limits;
pub mod reference;
pub mod sealed;
pub mod triage;
