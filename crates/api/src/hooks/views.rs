//! What `POST /v1/hooks/{workflow_id}` answers.

use serde::Serialize;
use utoipa::ToSchema;

/// The answer to an accepted hook.
#[derive(Serialize, ToSchema)]
pub struct HookAccepted {
    /// The run the request started, or for a repeated `webhook-id`, the run the first
    /// request started.
    pub run_id: String,
}
