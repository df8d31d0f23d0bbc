//! `POST /v1/workflows/{id}/backfill`: the runs a schedule would have started between
//! two times, started now, one per tick, each named after its tick as the schedule
//! names it, so a tick already run (or backfilled) is not run twice.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use futures::{StreamExt, TryStreamExt};
use jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::find as find_workflow;
use crate::plumbing::auth::{Authorized, needs};
use crate::plumbing::error::{ApiError, ApiResult, write_error};
use crate::plumbing::json::Valid;
use crate::plumbing::path::Path;
use crate::plumbing::validation::{Problems, Validate};
use crate::state::{ApiConfig, ApiState};
use flowline_core::crd::{Run, TriggerType, WorkflowState};
use flowline_core::cron::{self, Schedule};

/// Creates one call has in flight at once.
const IN_FLIGHT: usize = 8;

pub fn router() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new().routes(routes!(backfill))
}

/// Body of `POST /v1/workflows/{id}/backfill`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"from": "2026-11-01T00:00:00Z", "to": "2026-11-02T00:00:00Z"})))]
pub struct BackfillCreate {
    /// The first time (RFC 3339, included).
    #[schema(value_type = String, format = DateTime)]
    pub from: String,
    /// The last time (RFC 3339, included); not in the future.
    #[schema(value_type = String, format = DateTime)]
    pub to: String,
}

impl BackfillCreate {
    fn times(&self, p: &mut Problems) -> Option<(Timestamp, Timestamp)> {
        let parse = |field: &str, text: &str, p: &mut Problems| {
            text.parse::<Timestamp>()
                .map_err(|_| p.add(field, "must be an RFC 3339 time, e.g. 2026-11-01T00:00:00Z"))
                .ok()
        };
        let (from, to) = (parse("from", &self.from, p), parse("to", &self.to, p));
        let (from, to) = (from?, to?);
        if to < from {
            p.add("to", "must not be before from");
            return None;
        }
        if to > Timestamp::now() {
            p.add(
                "to",
                "must not be in the future: the schedule runs those ticks itself",
            );
            return None;
        }
        Some((from, to))
    }
}

impl Validate for BackfillCreate {
    fn validate(&self, _: &ApiConfig) -> Result<(), Problems> {
        let mut p = Problems::default();
        self.times(&mut p);
        p.finish()
    }
}

/// What a backfill started.
#[derive(Serialize, ToSchema, Debug)]
pub struct BackfillAccepted {
    /// Runs started: one per tick between `from` and `to` that had none yet.
    pub runs: usize,
}

#[utoipa::path(post, path = "/v1/workflows/{id}/backfill", operation_id = "workflows.backfill", summary = "Run a schedule's past ticks", tag = "workflows",
    description = "Scope: `execute`. Starts a run for each tick of the workflow's schedule from `from` to `to` \
        (at most 1,000 ticks), oldest first, each with `trigger.scheduled_at` its tick. A tick that already \
        has its run (scheduled or backfilled) gets no second one.",
    params(("id" = String, Path, description = "Workflow id")),
    request_body(content = BackfillCreate, content_type = "application/json"),
    responses((status = 202, description = "The runs started", body = BackfillAccepted),
              (status = 400, description = "Bad times, more than 1,000 ticks, or the workflow has no schedule"),
              (status = 404, description = "No such workflow"),
              (status = 409, description = "The workflow is paused (`workflow_paused`)")))]
async fn backfill(
    State(state): State<ApiState>,
    who: Authorized<needs::Execute>,
    Path(id): Path<String>,
    Valid(body): Valid<BackfillCreate>,
) -> ApiResult<(StatusCode, Json<BackfillAccepted>)> {
    let mut p = Problems::default();
    let times = body.times(&mut p);
    p.finish()?;
    let Some((from, to)) = times else {
        return Err(ApiError::field("to", "must not be before from"));
    };
    let wf = find_workflow(&state, &who.namespace, &id)?;
    if wf.spec.trigger.type_ != TriggerType::Schedule {
        return Err(ApiError::field(
            "id",
            "the workflow has no schedule to backfill (its trigger is not schedule)",
        ));
    }
    if wf.spec.state == WorkflowState::Paused {
        return Err(ApiError::WorkflowPaused);
    }
    let cron = wf.spec.trigger.cron.as_deref().unwrap_or_default();
    let schedule = Schedule::parse(cron, wf.spec.trigger.timezone.as_deref())
        .map_err(|e| ApiError::field("id", format!("the workflow's schedule: {e}")))?;
    let ticks = cron::ticks_between(&schedule, from, to).map_err(|_| {
        ApiError::field(
            "to",
            format!(
                "more than {} ticks between from and to: backfill a shorter span at a time",
                cron::MAX_BACKFILL
            ),
        )
    })?;
    let api: Api<Run> = Api::namespaced(state.client.clone(), &who.namespace);
    let now = Timestamp::now();
    let created: Vec<bool> = futures::stream::iter(ticks.into_iter().enumerate())
        .map(|(i, tick)| {
            // A millisecond apart: their creation order is the ticks' order.
            let run =
                Run::of_schedule(&wf, tick, now + jiff::SignedDuration::from_millis(i as i64));
            let api = api.clone();
            async move {
                match api.create(&PostParams::default(), &run).await {
                    Ok(_) => Ok(true),
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                    Err(e) => Err(write_error(e)),
                }
            }
        })
        .buffered(IN_FLIGHT)
        .try_collect()
        .await?;
    let runs = created.into_iter().filter(|c| *c).count();
    Ok((StatusCode::ACCEPTED, Json(BackfillAccepted { runs })))
}
