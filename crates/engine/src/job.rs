//! The job executor: one Kubernetes Job per step attempt, owned by the Run. Built-in
//! actions run the operator's own image as `flowline step`; `container` steps run the
//! user's image. The step's output is the JSON it writes to `$FLOWLINE_OUTPUT` (up to
//! 64 KiB, handed over by the pod's `output` container: flowline-core's
//! `engine::step_pod`) or, failing that, to /dev/termination-log (up to 4 KiB).

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerStateTerminated, EmptyDirVolumeSource, EnvVar, EnvVarSource,
    Pod, PodSecurityContext, PodSpec, PodTemplateSpec, ResourceRequirements, SeccompProfile,
    SecretKeySelector, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, ListParams, LogParams, ObjectMeta, PostParams};
use kube::runtime::wait::{Condition, await_condition, conditions};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::secrets::{Placeholders, SecretKeyRef};
use flowline_core::crd::{Action, Run, Step, labels};
use flowline_core::engine::step_pod::{
    self, Emitted, Ending, OUTPUT_CONTAINER, OUTPUT_DIR, OUTPUT_ENV, OUTPUT_FILE, STEP_CONTAINER,
};

/// Environment variable carrying a built-in step's rendered inputs into `flowline step`.
pub const STEP_ENV: &str = "FLOWLINE_STEP";

/// Prefix of the environment variables through which a built-in step Job receives secret
/// values (`FLOWLINE_SECRET_0`, …), each a `secretKeyRef`.
pub const SECRET_ENV_PREFIX: &str = "FLOWLINE_SECRET_";

/// The user and group step containers run as: the `nonroot` user of the distroless image
/// the operator's own image is built on.
pub const STEP_UID: i64 = 65532;

/// Size limit of the writable `/tmp` (an emptyDir) every step container gets, since the root
/// filesystem is read-only.
const TMP_SIZE: &str = "64Mi";

/// Size limit of the output volume: room for the largest output, and no more than a
/// step writing too much needs to be caught.
const OUTPUT_VOLUME_SIZE: &str = "1Mi";

/// How long a finished step Job (its pod and log) is kept by default.
pub const DEFAULT_JOB_TTL: Duration = Duration::from_secs(3600);

/// How much longer than a Job's deadline the engine waits for it: time for the
/// kubelet to stop the pod and the Job to be marked failed.
pub const DEADLINE_GRACE: Duration = Duration::from_secs(10);

/// How long reading a step pod's log may take before the engine gives up on it.
const LOG_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Default requests and limits of a step container.
pub const DEFAULT_CPU_REQUEST: &str = "50m";
pub const DEFAULT_MEMORY_REQUEST: &str = "64Mi";
pub const DEFAULT_CPU_LIMIT: &str = "1";
pub const DEFAULT_MEMORY_LIMIT: &str = "256Mi";

/// What FLOWLINE_STEP carries into `flowline step`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepEnvelope {
    pub action: Action,
    #[serde(default)]
    pub with: Value,
    /// Placeholder in `with` → the environment variable holding the value it stands for.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secrets: BTreeMap<String, String>,
}

/// CPU and memory of every step container.
#[derive(Debug, Clone, PartialEq)]
pub struct StepResources {
    pub cpu_request: Quantity,
    pub memory_request: Quantity,
    pub cpu_limit: Quantity,
    pub memory_limit: Quantity,
}

impl Default for StepResources {
    fn default() -> Self {
        let q = |s: &str| Quantity(s.to_owned());
        StepResources {
            cpu_request: q(DEFAULT_CPU_REQUEST),
            memory_request: q(DEFAULT_MEMORY_REQUEST),
            cpu_limit: q(DEFAULT_CPU_LIMIT),
            memory_limit: q(DEFAULT_MEMORY_LIMIT),
        }
    }
}

impl StepResources {
    fn requirements(&self) -> ResourceRequirements {
        let pair = |cpu: &Quantity, memory: &Quantity| {
            BTreeMap::from([
                ("cpu".to_owned(), cpu.clone()),
                ("memory".to_owned(), memory.clone()),
            ])
        };
        ResourceRequirements {
            requests: Some(pair(&self.cpu_request, &self.memory_request)),
            limits: Some(pair(&self.cpu_limit, &self.memory_limit)),
            ..Default::default()
        }
    }
}

/// A resource quantity flag (`500m`, `1`, `1.5`, `256Mi`, `1G`, `1e3`): checked at start-up
/// so that a typo fails the operator, not every step Job. The API server does the exact check.
pub fn parse_quantity(text: &str) -> Result<Quantity, String> {
    let number_end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(number_end);
    let number_ok = !number.is_empty()
        && number.matches('.').count() <= 1
        && number.chars().any(|c| c.is_ascii_digit());
    let suffix_ok = matches!(
        suffix,
        "" | "m" | "k" | "M" | "G" | "T" | "P" | "E" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei"
    ) || suffix.strip_prefix(['e', 'E']).is_some_and(|exp| {
        !exp.is_empty()
            && exp
                .trim_start_matches('-')
                .chars()
                .all(|c| c.is_ascii_digit())
    });
    if number_ok && suffix_ok {
        Ok(Quantity(text.to_owned()))
    } else {
        Err(format!(
            "{text:?} is not a resource quantity (e.g. 100m, 1, 256Mi)"
        ))
    }
}

/// How step Jobs are built.
#[derive(Debug, Clone, Default)]
pub struct JobSettings {
    /// Image of built-in steps (the operator's own image).
    pub step_image: String,
    /// Annotations added to every step pod.
    pub pod_annotations: BTreeMap<String, String>,
    /// Requests and limits of every step container.
    pub resources: StepResources,
    /// The operator's destination guard, enforced by `flowline step` in the pod too.
    pub destinations: flowline_egress::DestinationPolicy,
    /// How long a finished Job, its pod and its log are kept (`None`: [`DEFAULT_JOB_TTL`]).
    pub job_ttl: Option<Duration>,
}

/// Why a step's inputs cannot become a Job. Deterministic: the step fails without retrying.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    #[error("container steps need `image` (a string)")]
    MissingImage,
    #[error("`{0}` of a container step must be a list of strings")]
    NotStrings(&'static str),
    #[error(
        "env {0}: a secret must be the whole value of an env variable \
         (\"{{{{ secrets.<name>.<key> }}}}\"), not part of it"
    )]
    PartialSecret(String),
    #[error("a container step receives secrets only as env values, not in `{0}`")]
    SecretOutsideEnv(&'static str),
}

fn env_value(name: &str, value: String) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value),
        value_from: None,
    }
}

fn env_secret(name: &str, key: &SecretKeyRef) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: None,
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: key.name.clone(),
                key: key.key.clone(),
                optional: Some(false),
            }),
            ..Default::default()
        }),
    }
}

/// A container step's `env`: a value that is exactly one placeholder becomes a
/// `secretKeyRef`; a placeholder inside a longer value is refused, since the value would
/// have to be assembled in the Pod spec.
fn container_env(inputs: &Value, secrets: &Placeholders) -> Result<Vec<EnvVar>, JobError> {
    let Some(Value::Object(env)) = inputs.get("env") else {
        return Ok(Vec::new());
    };
    env.iter()
        .map(|(name, value)| {
            let text = super::actions::text_of(value);
            match secrets.get(&text) {
                Some(key) => Ok(env_secret(name, key)),
                None if secrets.found_in(&text).next().is_some() => {
                    Err(JobError::PartialSecret(name.clone()))
                }
                None => Ok(env_value(name, text)),
            }
        })
        .collect()
}

/// A container step's `command` or `args`.
fn strings(inputs: &Value, field: &'static str) -> Result<Option<Vec<String>>, JobError> {
    match inputs.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| item.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .map(Some)
            .ok_or(JobError::NotStrings(field)),
        Some(_) => Err(JobError::NotStrings(field)),
    }
}

fn user_container(inputs: &Value, secrets: &Placeholders) -> Result<Container, JobError> {
    for field in ["image", "command", "args"] {
        let text = inputs.get(field).map(Value::to_string).unwrap_or_default();
        if secrets.found_in(&text).next().is_some() {
            return Err(JobError::SecretOutsideEnv(field));
        }
    }
    Ok(Container {
        image: Some(
            inputs
                .get("image")
                .and_then(Value::as_str)
                .filter(|image| !image.is_empty())
                .ok_or(JobError::MissingImage)?
                .to_owned(),
        ),
        command: strings(inputs, "command")?,
        args: strings(inputs, "args")?,
        env: Some(container_env(inputs, secrets)?),
        ..Default::default()
    })
}

/// `flowline step` with the inputs in FLOWLINE_STEP and each secret the inputs use in a
/// FLOWLINE_SECRET_<n> variable.
fn built_in_container(
    action: Action,
    inputs: &Value,
    secrets: &Placeholders,
    settings: &JobSettings,
) -> Container {
    let text = inputs.to_string();
    let mut envelope = StepEnvelope {
        action,
        with: inputs.clone(),
        secrets: BTreeMap::new(),
    };
    let mut env = Vec::new();
    for (n, (placeholder, key)) in secrets.found_in(&text).enumerate() {
        let name = format!("{SECRET_ENV_PREFIX}{n}");
        env.push(env_secret(&name, key));
        envelope.secrets.insert(placeholder.to_owned(), name);
    }
    // Serializing a struct of JSON values and strings cannot fail.
    let envelope = serde_json::to_string(&envelope).unwrap_or_default();
    env.insert(0, env_value(STEP_ENV, envelope));
    env.push(env_value(
        flowline_egress::ALLOW_CIDRS_ENV,
        settings.destinations.to_list(),
    ));
    Container {
        image: Some(settings.step_image.clone()),
        args: Some(vec!["step".to_owned()]),
        env: Some(env),
        ..Default::default()
    }
}

/// The pod-level half of the restricted Pod Security Standard.
fn pod_security() -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(STEP_UID),
        run_as_group: Some(STEP_UID),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".to_owned(),
            localhost_profile: None,
        }),
        ..Default::default()
    }
}

/// The container-level half; the termination log stays writable (the kubelet mounts it).
fn container_security() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_owned()]),
            add: None,
        }),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        ..Default::default()
    }
}

fn empty_dir(name: &str, size: &str) -> Volume {
    Volume {
        name: name.to_owned(),
        empty_dir: Some(EmptyDirVolumeSource {
            size_limit: Some(Quantity(size.to_owned())),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn output_mount(read_only: bool) -> VolumeMount {
    VolumeMount {
        name: "output".to_owned(),
        mount_path: OUTPUT_DIR.to_owned(),
        read_only: Some(read_only),
        ..Default::default()
    }
}

/// `flowline step emit-output`: small, restricted like the step, reading the output
/// volume only.
fn output_container(settings: &JobSettings) -> Container {
    let quantity = |q: &str| Quantity(q.to_owned());
    Container {
        name: OUTPUT_CONTAINER.to_owned(),
        image: Some(settings.step_image.clone()),
        args: Some(vec!["step".to_owned(), "emit-output".to_owned()]),
        termination_message_policy: Some("File".to_owned()),
        security_context: Some(container_security()),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_owned(), quantity("10m")),
                ("memory".to_owned(), quantity("16Mi")),
            ])),
            limits: Some(BTreeMap::from([
                ("cpu".to_owned(), quantity("100m")),
                ("memory".to_owned(), quantity("64Mi")),
            ])),
            ..Default::default()
        }),
        volume_mounts: Some(vec![output_mount(true)]),
        ..Default::default()
    }
}

/// The Job of one attempt. Pure. `secrets` are the placeholders the inputs were rendered
/// with: they become `secretKeyRef`s, never values in the Pod spec.
/// `key` names the attempt: the step id, or `<step id>.<index>` for an iteration of a
/// `forEach` step.
#[allow(clippy::too_many_arguments)]
pub fn build(
    run: &Run,
    step: &Step,
    key: &str,
    attempt: u32,
    inputs: &Value,
    timeout: Option<Duration>,
    secrets: &Placeholders,
    settings: &JobSettings,
) -> Result<Job, JobError> {
    let container = match step.action {
        Action::Container => user_container(inputs, secrets)?,
        action => built_in_container(action, inputs, secrets, settings),
    };
    let mut env = container.env.clone().unwrap_or_default();
    env.push(env_value(OUTPUT_ENV, OUTPUT_FILE.to_owned()));
    let container = Container {
        name: STEP_CONTAINER.to_owned(),
        termination_message_policy: Some("File".to_owned()),
        security_context: Some(container_security()),
        resources: Some(settings.resources.requirements()),
        env: Some(env),
        volume_mounts: Some(vec![
            VolumeMount {
                name: "tmp".to_owned(),
                mount_path: "/tmp".to_owned(),
                ..Default::default()
            },
            output_mount(false),
        ]),
        ..container
    };
    let labels = BTreeMap::from([
        (labels::RUN.to_owned(), run.name_any()),
        (labels::STEP.to_owned(), key.to_owned()),
        (labels::WORKFLOW.to_owned(), run.spec.workflow_ref.clone()),
    ]);
    let pod = PodSpec {
        restart_policy: Some("Never".to_owned()),
        containers: vec![container, output_container(settings)],
        // The `output` container waits for the step's processes to end before it hands
        // over the output file, so it starts beside the step instead of after it.
        share_process_namespace: Some(true),
        security_context: Some(pod_security()),
        // Steps need no Kubernetes API access, nor the addresses of every Service.
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        volumes: Some(vec![
            empty_dir("tmp", TMP_SIZE),
            empty_dir("output", OUTPUT_VOLUME_SIZE),
        ]),
        ..Default::default()
    };
    Ok(Job {
        metadata: ObjectMeta {
            name: Some(step_pod::job_name(&run.name_any(), key, attempt)),
            labels: Some(labels.clone()),
            owner_references: run.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        spec: Some(JobSpec {
            backoff_limit: Some(0),
            active_deadline_seconds: timeout.map(|t| t.as_secs().max(1) as i64),
            ttl_seconds_after_finished: Some(
                settings.job_ttl.unwrap_or(DEFAULT_JOB_TTL).as_secs() as i32
            ),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    annotations: Some(settings.pod_annotations.clone()),
                    ..Default::default()
                }),
                spec: Some(pod),
            },
            ..Default::default()
        }),
        status: None,
    })
}

/// Runs one attempt as a Job and returns the step's output or the failure message.
pub async fn run_attempt(client: &Client, namespace: &str, job: Job) -> Result<Value, String> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    let name = job.name_any();
    match jobs.create(&PostParams::default(), &job).await {
        Ok(_) => {}
        // The attempt's Job exists already (an operator restart): wait for it — if it
        // is this run's. A Job of an earlier Run of the same name (deleted, recreated)
        // is not this attempt's result.
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let existing = jobs
                .get_metadata_opt(&name)
                .await
                .map_err(|e| format!("reading Job {name} failed: {e}"))?;
            let owner = |refs: &[OwnerReference]| refs.first().map(|o| o.uid.clone());
            let ours = existing
                .is_some_and(|m| owner(m.owner_references()) == owner(job.owner_references()));
            if !ours {
                return Err(format!(
                    "Job {name} exists but belongs to another Run; delete it to run this step"
                ));
            }
        }
        Err(e) => return Err(format!("creating Job {name} failed: {e}")),
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let finished = await_condition(jobs.clone(), &name, |j: Option<&Job>| {
        conditions::is_job_completed().matches_object(j) || job_failed(j)
    });
    let finished = tokio::select! {
        output = succeeded_early(pods.clone(), &name) => return output,
        finished = finished => finished,
    };
    let finished = match finished {
        Ok(job) => job,
        Err(e) => return Err(format!("watching Job {name} failed: {e}")),
    };
    let deadline_exceeded = finished.as_ref().is_some_and(deadline_exceeded);
    let pod = pods
        .list(&ListParams::default().labels(&format!("job-name={name}")))
        .await
        .map_err(|e| format!("reading the pod of Job {name} failed: {e}"))?
        .items
        .into_iter()
        .next();
    let Some(pod) = pod else {
        return Err(if deadline_exceeded {
            step_pod::failure_message(
                &Ending {
                    deadline_exceeded,
                    ..Default::default()
                },
                "",
            )
        } else {
            format!("Job {name} failed without a pod")
        });
    };
    let pod_name = pod.name_any();
    let step = terminated(&pod, STEP_CONTAINER);
    match step {
        Some(t) if t.exit_code == 0 => {
            let emitted = terminated(&pod, OUTPUT_CONTAINER)
                .and_then(|o| o.message)
                .and_then(|m| Emitted::from_log(&m));
            let emitted = match emitted {
                Some(Emitted::InLog) => {
                    let log = read_log(&pods, &pod_name, OUTPUT_CONTAINER, LogPart::Head).await;
                    Emitted::from_log(&log?)
                }
                other => other,
            };
            succeeded_output(emitted, t)
        }
        ended => {
            let ending = Ending {
                exit_code: ended.as_ref().map_or(-1, |t| t.exit_code),
                reason: ended.as_ref().and_then(|t| t.reason.clone()),
                message: ended.and_then(|t| t.message),
                deadline_exceeded,
            };
            // A log that cannot be read leaves the error without its tail.
            let log = read_log(&pods, &pod_name, STEP_CONTAINER, LogPart::Tail)
                .await
                .unwrap_or_default();
            Err(step_pod::failure_message(&ending, &log))
        }
    }
}

/// The output of a step whose container exited 0: what the `output` container emitted,
/// or else the JSON in the step's termination message (`{}` when it left none).
fn succeeded_output(
    emitted: Option<Emitted>,
    step: ContainerStateTerminated,
) -> Result<Value, String> {
    if let Some(result) = emitted.and_then(Emitted::result) {
        return result;
    }
    let message = step.message.unwrap_or_default();
    if message.trim().is_empty() {
        Ok(json!({}))
    } else {
        serde_json::from_str(&message)
            .map_err(|_| format!("the step wrote output that is not JSON: {message}"))
    }
}

/// The output of an attempt whose step container exited 0, as soon as the pod's status
/// says so and the `output` container's line is in its log. That is a relist of the
/// kubelet (the `output` container's own exit) and a pass of the Job controller
/// sooner than the Job's completion. Pends in every other case — a failure, a pod being
/// deleted (a deadline or a cancel stops it), a line not printed yet — and the Job's
/// completion decides.
async fn succeeded_early(pods: Api<Pod>, job: &str) -> Result<Value, String> {
    let config = watcher::Config::default().labels(&format!("job-name={job}"));
    let mut seen = std::pin::pin!(
        watcher(pods.clone(), config)
            .default_backoff()
            .applied_objects()
    );
    while let Some(pod) = seen.next().await {
        let Ok(pod) = pod else { continue };
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(step) = terminated(&pod, STEP_CONTAINER).filter(|t| t.exit_code == 0) else {
            continue;
        };
        if let Some(emitted) = printed_output(&pods, &pod.name_any()).await {
            return succeeded_output(Some(emitted), step);
        }
    }
    std::future::pending().await
}

/// Looks at the `output` container's log this often, this many times, once the step's
/// container has exited: it prints within milliseconds of the step's processes ending,
/// but the pod's status may show the step exited just before that.
const PRINT_LOOK_EVERY: Duration = Duration::from_millis(50);
const PRINT_LOOKS: u32 = 10;

/// The `output` container's line, once it is in its log; None when it has not come
/// within [`PRINT_LOOKS`] looks (not started yet, say): the pod's next status change
/// brings another look.
async fn printed_output(pods: &Api<Pod>, pod: &str) -> Option<Emitted> {
    for look in 0..PRINT_LOOKS {
        if look > 0 {
            tokio::time::sleep(PRINT_LOOK_EVERY).await;
        }
        let log = read_log(pods, pod, OUTPUT_CONTAINER, LogPart::Head).await;
        if let Some(emitted) = log.ok().as_deref().and_then(Emitted::from_log) {
            return Some(emitted);
        }
    }
    None
}

/// The terminated state of one of a pod's containers.
fn terminated(pod: &Pod, container: &str) -> Option<ContainerStateTerminated> {
    step_pod::container_state(pod, container)?
        .terminated
        .clone()
}

enum LogPart {
    /// The beginning, up to the largest output line.
    Head,
    /// The end, enough for a failed step's error.
    Tail,
}

/// Reads part of a container's log, bounded in bytes and in time.
async fn read_log(
    pods: &Api<Pod>,
    pod: &str,
    container: &str,
    part: LogPart,
) -> Result<String, String> {
    let params = match part {
        LogPart::Head => LogParams {
            container: Some(container.to_owned()),
            limit_bytes: Some(step_pod::OUTPUT_LOG_LIMIT as i64),
            ..Default::default()
        },
        LogPart::Tail => LogParams {
            container: Some(container.to_owned()),
            tail_lines: Some(100),
            limit_bytes: Some(4 * step_pod::ERROR_LOG_TAIL as i64),
            ..Default::default()
        },
    };
    match tokio::time::timeout(LOG_READ_TIMEOUT, pods.logs(pod, &params)).await {
        Ok(Ok(log)) => Ok(log),
        Ok(Err(e)) => Err(format!("reading the log of {pod}/{container} failed: {e}")),
        Err(_) => Err(format!(
            "reading the log of {pod}/{container} took longer than {}s",
            LOG_READ_TIMEOUT.as_secs()
        )),
    }
}

fn deadline_exceeded(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter().any(|c| {
                c.type_ == "Failed"
                    && c.status == "True"
                    && c.reason.as_deref() == Some("DeadlineExceeded")
            })
        })
}

fn job_failed(job: Option<&Job>) -> bool {
    job.and_then(|j| j.status.as_ref())
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Failed" && c.status == "True"))
}

/// Deletes the Jobs of a run that are still active (cancel).
pub async fn delete_run_jobs(client: &Client, namespace: &str, run: &str) {
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    let selector = format!("{}={run}", labels::RUN);
    let _ = jobs
        .delete_collection(
            &DeleteParams::background(),
            &ListParams::default().labels(&selector),
        )
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secrets::StepSecrets;

    fn run() -> Run {
        serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Run",
            "metadata": {"name": "order-sync-1767225900", "namespace": "n", "uid": "u-1"},
            "spec": {"workflowRef": "order-sync"}
        }))
        .unwrap()
    }

    fn step(action: &str) -> Step {
        serde_json::from_value(json!({"id": "fetch-orders", "action": action})).unwrap()
    }

    fn secrets() -> StepSecrets {
        StepSecrets::from_values(BTreeMap::from([(
            "crm".to_string(),
            BTreeMap::from([
                ("token".to_string(), "t0k3n-value".to_string()),
                ("user".to_string(), "ada-user".to_string()),
            ]),
        )]))
    }

    /// Renders `with` the way the runner does for a Job: secrets as placeholders.
    fn rendered(with: Value, placeholders: &Placeholders) -> Value {
        let ctx = json!({"secrets": placeholders.context(), "run": {"id": "r"}});
        flowline_core::engine::template::render(&with, &ctx).unwrap()
    }

    fn pod(job: Job) -> PodSpec {
        job.spec.unwrap().template.spec.unwrap()
    }

    #[test]
    fn built_in_steps_run_the_operator_image_with_their_inputs() {
        let settings = JobSettings {
            step_image: "flowline:1".into(),
            ..Default::default()
        };
        let job = build(
            &run(),
            &step("transform"),
            "fetch-orders",
            2,
            &json!({"value": 1}),
            Some(Duration::from_millis(1500)),
            &Placeholders::default(),
            &settings,
        )
        .unwrap();
        assert_eq!(
            job.metadata.owner_references.as_ref().unwrap()[0].uid,
            "u-1"
        );
        assert_eq!(
            job.metadata.labels.as_ref().unwrap()[labels::STEP],
            "fetch-orders"
        );
        let spec = job.spec.unwrap();
        assert_eq!(spec.backoff_limit, Some(0));
        assert_eq!(spec.active_deadline_seconds, Some(1));
        let pod = spec.template.spec.unwrap();
        let c = &pod.containers[0];
        assert_eq!(
            (c.image.as_deref(), c.args.as_deref()),
            (Some("flowline:1"), Some(&["step".to_string()][..]))
        );
        let env = c.env.as_ref().unwrap();
        assert_eq!(env.len(), 3);
        assert_eq!(env[1].name, flowline_egress::ALLOW_CIDRS_ENV);
        assert_eq!(
            (env[2].name.as_str(), env[2].value.as_deref()),
            (OUTPUT_ENV, Some(OUTPUT_FILE))
        );
        let envelope: StepEnvelope =
            serde_json::from_str(env[0].value.as_deref().unwrap()).unwrap();
        assert_eq!(
            envelope,
            StepEnvelope {
                action: Action::Transform,
                with: json!({"value": 1}),
                secrets: BTreeMap::new()
            }
        );
    }

    #[test]
    fn built_in_steps_get_secrets_by_secret_key_ref_never_as_values() {
        let placeholders = secrets().placeholders();
        let inputs = rendered(
            json!({"url": "https://x", "headers": {"Authorization": "Bearer {{ secrets.crm.token }}"}}),
            &placeholders,
        );
        let job = build(
            &run(),
            &step("http.request"),
            "fetch-orders",
            1,
            &inputs,
            None,
            &placeholders,
            &JobSettings::default(),
        )
        .unwrap();
        let spec_text = serde_json::to_string(&job).unwrap();
        assert!(!spec_text.contains("t0k3n-value"), "{spec_text}");
        let env = pod(job).containers[0].env.clone().unwrap();
        // Only the key the inputs use (`user` was read but not used), then the allow-list
        // and the output file.
        assert_eq!(env.len(), 4, "{env:?}");
        assert_eq!(env[1].name, "FLOWLINE_SECRET_0");
        assert_eq!(env[1].value, None);
        let selector = env[1]
            .value_from
            .as_ref()
            .unwrap()
            .secret_key_ref
            .as_ref()
            .unwrap();
        assert_eq!(
            (selector.name.as_str(), selector.key.as_str()),
            ("crm", "token")
        );
        let envelope: StepEnvelope =
            serde_json::from_str(env[0].value.as_deref().unwrap()).unwrap();
        let header = envelope.with["headers"]["Authorization"].as_str().unwrap();
        let placeholder = header.strip_prefix("Bearer ").unwrap();
        assert_eq!(envelope.secrets[placeholder], "FLOWLINE_SECRET_0");
        // And `flowline step` puts the value back.
        let mut with = envelope.with.clone();
        crate::secrets::substitute(
            &mut with,
            &BTreeMap::from([(placeholder.to_string(), "t0k3n-value".to_string())]),
        );
        assert_eq!(with["headers"]["Authorization"], "Bearer t0k3n-value");
    }

    #[test]
    fn step_pods_run_restricted_with_default_resources() {
        for (action, inputs) in [
            ("transform", json!({"value": 1})),
            ("container", json!({"image": "busybox"})),
        ] {
            let job = build(
                &run(),
                &step(action),
                "fetch-orders",
                1,
                &inputs,
                None,
                &Placeholders::default(),
                &JobSettings::default(),
            )
            .unwrap();
            let pod = pod(job);
            assert_eq!(pod.automount_service_account_token, Some(false));
            let ctx = pod.security_context.as_ref().unwrap();
            assert_eq!(
                (ctx.run_as_non_root, ctx.run_as_user),
                (Some(true), Some(STEP_UID))
            );
            assert_eq!(
                ctx.seccomp_profile.as_ref().unwrap().type_,
                "RuntimeDefault"
            );
            let c = &pod.containers[0];
            let sc = c.security_context.as_ref().unwrap();
            assert_eq!(sc.allow_privilege_escalation, Some(false));
            assert_eq!(sc.read_only_root_filesystem, Some(true));
            assert_eq!(
                sc.capabilities.as_ref().unwrap().drop.as_deref(),
                Some(&["ALL".to_string()][..])
            );
            assert_eq!(sc.capabilities.as_ref().unwrap().add, None);
            let resources = c.resources.as_ref().unwrap();
            assert_eq!(
                resources.limits.as_ref().unwrap()["memory"],
                Quantity(DEFAULT_MEMORY_LIMIT.into())
            );
            assert_eq!(
                resources.requests.as_ref().unwrap()["cpu"],
                Quantity(DEFAULT_CPU_REQUEST.into())
            );
            assert_eq!(c.volume_mounts.as_ref().unwrap()[0].mount_path, "/tmp");
        }
    }

    #[test]
    fn container_steps_run_the_users_image() {
        let inputs = json!({"image": "busybox", "command": ["sh", "-c"], "args": ["echo {} > /dev/termination-log"], "env": {"A": "1", "N": 2}});
        let job = build(
            &run(),
            &step("container"),
            "fetch-orders",
            1,
            &inputs,
            None,
            &Placeholders::default(),
            &JobSettings::default(),
        )
        .unwrap();
        let c = &pod(job).containers[0];
        assert_eq!(c.image.as_deref(), Some("busybox"));
        assert_eq!(
            c.command.as_deref(),
            Some(&["sh".to_string(), "-c".to_string()][..])
        );
        let env = c.env.as_ref().unwrap();
        assert_eq!(
            env.iter()
                .map(|e| (e.name.as_str(), e.value.as_deref()))
                .collect::<Vec<_>>(),
            vec![
                ("A", Some("1")),
                ("N", Some("2")),
                (OUTPUT_ENV, Some(OUTPUT_FILE))
            ]
        );
    }

    #[test]
    fn the_output_container_starts_beside_the_step_and_reads_its_volume_only() {
        let settings = JobSettings {
            step_image: "flowline:1".into(),
            job_ttl: Some(Duration::from_secs(60)),
            ..Default::default()
        };
        let inputs = json!({"image": "busybox"});
        let job = build(
            &run(),
            &step("container"),
            "s",
            1,
            &inputs,
            None,
            &Placeholders::default(),
            &settings,
        )
        .unwrap();
        assert_eq!(
            job.spec.as_ref().unwrap().ttl_seconds_after_finished,
            Some(60)
        );
        let pod = pod(job);
        assert_eq!(pod.share_process_namespace, Some(true));
        let names: Vec<_> = pod.containers.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, [STEP_CONTAINER, OUTPUT_CONTAINER]);
        let output = &pod.containers[1];
        assert_eq!(output.image.as_deref(), Some("flowline:1"));
        assert_eq!(
            output.args.as_deref(),
            Some(&["step".to_string(), "emit-output".to_string()][..])
        );
        let mounts = |c: &Container| {
            c.volume_mounts
                .iter()
                .flatten()
                .map(|m| (m.mount_path.clone(), m.read_only == Some(true)))
                .collect::<Vec<_>>()
        };
        assert_eq!(mounts(output), [(OUTPUT_DIR.to_string(), true)]);
        assert!(mounts(&pod.containers[0]).contains(&(OUTPUT_DIR.to_string(), false)));
        assert_eq!(
            output.security_context, pod.containers[0].security_context,
            "restricted like the step"
        );
        let default_ttl = build(
            &run(),
            &step("container"),
            "s",
            1,
            &inputs,
            None,
            &Placeholders::default(),
            &JobSettings::default(),
        )
        .unwrap();
        assert_eq!(
            default_ttl.spec.unwrap().ttl_seconds_after_finished,
            Some(DEFAULT_JOB_TTL.as_secs() as i32)
        );
    }

    #[test]
    fn container_env_gets_whole_secrets_by_secret_key_ref_and_refuses_parts() {
        let placeholders = secrets().placeholders();
        let inputs = rendered(
            json!({"image": "busybox", "env": {"TOKEN": "{{ secrets.crm.token }}", "PLAIN": "x"}}),
            &placeholders,
        );
        let settings = JobSettings::default();
        let job = build(
            &run(),
            &step("container"),
            "fetch-orders",
            1,
            &inputs,
            None,
            &placeholders,
            &settings,
        )
        .unwrap();
        assert!(!serde_json::to_string(&job).unwrap().contains("t0k3n-value"));
        let env = pod(job).containers[0].env.clone().unwrap();
        let token = env.iter().find(|e| e.name == "TOKEN").unwrap();
        assert_eq!(token.value, None);
        let selector = token
            .value_from
            .as_ref()
            .unwrap()
            .secret_key_ref
            .as_ref()
            .unwrap();
        assert_eq!(
            (selector.name.as_str(), selector.key.as_str()),
            ("crm", "token")
        );

        let refused = |with: Value| {
            let inputs = rendered(with, &placeholders);
            build(
                &run(),
                &step("container"),
                "fetch-orders",
                1,
                &inputs,
                None,
                &placeholders,
                &settings,
            )
            .expect_err("refused")
        };
        let partial =
            refused(json!({"image": "busybox", "env": {"AUTH": "Bearer {{ secrets.crm.token }}"}}));
        assert_eq!(partial, JobError::PartialSecret("AUTH".into()));
        assert_eq!(
            partial.to_string(),
            "env AUTH: a secret must be the whole value of an env variable \
             (\"{{ secrets.<name>.<key> }}\"), not part of it"
        );
        assert_eq!(
            refused(json!({"image": "busybox", "env": {"ALL": "{{ secrets.crm }}"}})),
            JobError::PartialSecret("ALL".into())
        );
        assert_eq!(
            refused(json!({"image": "busybox", "args": ["--token", "{{ secrets.crm.token }}"]})),
            JobError::SecretOutsideEnv("args")
        );
        assert_eq!(
            refused(json!({"image": "{{ secrets.crm.user }}"})),
            JobError::SecretOutsideEnv("image")
        );
    }

    #[test]
    fn malformed_container_inputs_fail_instead_of_building_an_empty_job() {
        let build_with = |inputs: Value| {
            build(
                &run(),
                &step("container"),
                "fetch-orders",
                1,
                &inputs,
                None,
                &Placeholders::default(),
                &JobSettings::default(),
            )
        };
        assert_eq!(build_with(json!({})).unwrap_err(), JobError::MissingImage);
        assert_eq!(
            build_with(json!({"image": 3})).unwrap_err(),
            JobError::MissingImage
        );
        assert_eq!(
            build_with(json!({"image": "x", "command": "sh -c"})).unwrap_err(),
            JobError::NotStrings("command")
        );
        assert_eq!(
            build_with(json!({"image": "x", "args": ["a", 1]})).unwrap_err(),
            JobError::NotStrings("args")
        );
    }

    #[test]
    fn resource_quantities_are_checked() {
        for ok in ["50m", "1", "1.5", "256Mi", "1G", "1e3", "2Gi"] {
            assert_eq!(parse_quantity(ok), Ok(Quantity(ok.into())), "{ok}");
        }
        for bad in ["", "m", "1.2.3", "256MB", "-1", "one", "1 Gi", "1e"] {
            assert!(parse_quantity(bad).is_err(), "{bad}");
        }
    }
}
