//! Hostile-tenant tests: each tries an attack as an untrusted party would (an API key of
//! any scope, a workflow author with kubectl, a server a step calls, a webhook receiver)
//! and checks that it is refused or bounded and that other tenants are still served.

mod bulk;
mod callbacks;
mod calls;
mod egress;
mod events;
mod nesting;
mod ratelimit;
mod secrets;
mod status;
mod time_control;

#[path = "../../support/step_process.rs"]
pub(super) mod step_process;
