//! The tokens of a run's `callback` steps, stored before its first step executes.

use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use flowline_core::crd::{Action, CallbackToken, Run, RunStatus, WorkflowSnapshot};
use flowline_core::engine::callback::new_token;

/// Makes sure `status` holds a token for every `callback` step of `wf`, and that the
/// API server has them before any step can render a URL: a run that lacks some gets
/// them in one write, conditional on the Run as read, under this execution's id. Any
/// step may hand a URL out (it renders in every step), so a token must never change
/// once a step could have seen it. Returns the Run as written (or as it was, when
/// nothing was missing); None when the write failed (the run changed meanwhile, or is
/// gone): the controller looks at it again.
pub(crate) async fn ensure_tokens(
    api: &Api<Run>,
    run: Run,
    wf: &WorkflowSnapshot,
    status: &mut RunStatus,
) -> Option<Run> {
    let (namespace, name) = (run.namespace().unwrap_or_default(), run.name_any());
    let mut added = false;
    for step in wf.steps.iter().filter(|s| s.action == Action::Callback) {
        if !status.callback_tokens.iter().any(|t| t.step_id == step.id) {
            status.callback_tokens.push(CallbackToken {
                step_id: step.id.clone(),
                token: new_token(&namespace, &name),
            });
            added = true;
        }
    }
    if !added {
        return Some(run);
    }
    let patch = json!({
        "metadata": {"resourceVersion": run.resource_version()},
        "status": {
            "callbackTokens": status.callback_tokens,
            "executionId": status.execution_id,
        },
    });
    match api
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(written) => Some(written),
        Err(e) => {
            tracing::info!(run = %name, error = %e, "callback tokens not stored; the run is looked at again");
            None
        }
    }
}
