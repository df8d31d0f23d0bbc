//! The apply layer of idempotent run creation (the decisions are in
//! [`crate::plumbing::idempotency`]):
//! walks a key's Run names through the watch cache and creates the run under the first
//! free one, letting the API server arbitrate races.

use super::input::{self, RunCreate};
use super::{answer, create, new_run, read_whole};
use crate::cache;
use crate::plumbing::error::{ApiError, ApiResult, write_error};
use crate::plumbing::idempotency::{self, Outcome};
use crate::state::ApiState;
use axum::http::StatusCode;
use axum::response::Response;
use flowline_core::clock::now_ms;
use flowline_core::crd::timestamps::created_at;
use flowline_core::crd::{Run, Workflow};
use flowline_kube::lenient::Lenient;
use kube::{Api, ResourceExt};

/// Longest walk along a key's names; each step passes a distinct existing run, so only
/// a broken cache could make a walk this long.
const MAX_KEY_WALK: usize = 1000;

/// `POST /v1/workflows/{id}/runs` with an Idempotency-Key: walks the key's names from
/// the first, answering the run that holds the key, or creating it under the first free
/// name. The API server arbitrates races: the loser's create fails with AlreadyExists,
/// and it answers the winner's run.
pub(super) async fn start(
    state: &ApiState,
    namespace: &str,
    wf: &Workflow,
    body: &Option<RunCreate>,
    key: String,
) -> ApiResult<Response> {
    let workflow = wf.name_any();
    let (payload, tags, priority) = (
        input::payload(body),
        input::tags(body),
        input::priority(body),
    );
    let digest = idempotency::request_digest(payload.as_ref(), &tags, priority);
    let req = idempotency::Request {
        workflow: &workflow,
        key: &key,
        digest: &digest,
        now: now_ms(),
    };
    let mut name = idempotency::head_name(&workflow, &key);
    // Runs the cache still shows but the API server no longer has: a deletion the watch
    // has not delivered yet must neither answer for the key nor block its name.
    let mut gone: Vec<String> = Vec::new();
    for _ in 0..MAX_KEY_WALK {
        // A free name is taken only when no run holds the key elsewhere: a Run applied
        // with kubectl with this key, or a later name whose predecessor retention deleted.
        let cached = cache::get(&state.caches.runs, namespace, &name)
            .filter(|run| !gone.contains(&run.name_any()))
            .or_else(|| live_holder(state, namespace, &req, &gone));
        let holder = match cached {
            Some(run) => Holder::Run(run),
            None => {
                let run = new_run(wf, &name, body, |run| {
                    run.spec.idempotency_key = Some(key.clone());
                    run.annotations_mut()
                        .insert(idempotency::DIGEST_ANNOTATION.into(), digest.clone());
                })?;
                match create(state, namespace, &run).await {
                    Ok(created) => return Ok(answer(state, StatusCode::CREATED, &created)),
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    Err(e) => return Err(write_error(e)),
                }
                // Lost a race: judge the run that won as the API server has it (the
                // cache may not have it yet).
                match read_holder(state, namespace, &name).await? {
                    Some(winner) => winner,
                    None => continue, // deleted meanwhile: the name is free again
                }
            }
        };
        match holder {
            Holder::Run(run) => match idempotency::decide(Some(&run), &req) {
                Outcome::Replay => {
                    cache::await_write(&state.caches.runs, &*run).await;
                    match read_whole(state, namespace, &run.name_any()).await {
                        Ok(whole) => return Ok(answer(state, StatusCode::OK, &whole)),
                        // Deleted since the cache saw it: walk again without it.
                        Err(ApiError::NotFound(_)) => gone.push(run.name_any()),
                        Err(e) => return Err(e),
                    }
                }
                Outcome::Reused => return Err(ApiError::IdempotencyKeyReused),
                Outcome::Next(next) => name = next,
                Outcome::Create => {}
            },
            Holder::Undecodable(uid) => name = idempotency::next_name(&workflow, &key, &uid),
        }
    }
    Err(ApiError::Internal(anyhow::anyhow!(
        "Idempotency-Key walk of workflow {workflow} passed {MAX_KEY_WALK} names"
    )))
}

/// What holds a name, as read from the API server.
enum Holder {
    Run(std::sync::Arc<Run>),
    /// A Run stored with kubectl that cannot be decoded: only its uid is known.
    Undecodable(String),
}

async fn read_holder(state: &ApiState, namespace: &str, name: &str) -> ApiResult<Option<Holder>> {
    let api: Api<Lenient<Run>> = Api::namespaced(state.client.clone(), namespace);
    Ok(match api.get_opt(name).await? {
        None => None,
        Some(Lenient::Decoded(run)) => Some(Holder::Run(run)),
        Some(Lenient::Undecodable(failure)) => Some(Holder::Undecodable(
            failure.metadata.uid.clone().unwrap_or_default(),
        )),
    })
}

/// The newest cached run that holds `req`'s key, wherever it is named.
fn live_holder(
    state: &ApiState,
    namespace: &str,
    req: &idempotency::Request,
    gone: &[String],
) -> Option<std::sync::Arc<Run>> {
    state
        .caches
        .runs_of_workflow(namespace, req.workflow)
        .into_iter()
        .filter(|r| idempotency::holds(r, req) && !gone.contains(&r.name_any()))
        .max_by_key(|r| created_at(&r.metadata))
}
