//! What each built-in action does with its inputs: the one part of the reference the
//! types cannot say. A test keeps this table naming every `Action` of the CRD schema,
//! and checks each example against the schema, the spec check and the template engine.

use crate::crd::Action;
use crate::engine::waiting::MAX_WAIT_MS;

/// One input of an action (a key of the step's `with`).
pub struct Input {
    pub name: &'static str,
    pub type_: &'static str,
    pub required: bool,
    /// What applies without it; empty when nothing does.
    pub default: &'static str,
    pub description: String,
}

/// One built-in action.
pub struct ActionDoc {
    pub action: Action,
    /// One line, for the summary table.
    pub summary: &'static str,
    /// More about how it executes.
    pub details: String,
    pub inputs: Vec<Input>,
    /// Its output (what later steps read as `steps.<id>.output`) and how it fails.
    pub output: String,
    /// One step using it, as YAML (an item of `spec.steps`).
    pub example: &'static str,
}

fn input(
    name: &'static str,
    type_: &'static str,
    required: bool,
    default: &'static str,
    description: impl Into<String>,
) -> Input {
    Input {
        name,
        type_,
        required,
        default,
        description: description.into(),
    }
}

/// Every built-in action, in the order the reference lists them.
pub fn table() -> Vec<ActionDoc> {
    let year = format!("at most {MAX_WAIT_MS} (366 days)");
    vec![
        ActionDoc {
            action: Action::HttpRequest,
            summary: "Sends an HTTP request and records the answer.",
            details: "Each attempt carries an `Idempotency-Key` header (`flowline-` and 32 hex \
                      digits) unless `headers` sets one: the same for every execution of one \
                      attempt, new for each retry, so a server can drop repeats. The URL, and \
                      every redirect followed, must not point at loopback, private, link-local \
                      or other internal addresses unless the operator allows them."
                .into(),
            inputs: vec![
                input("url", "string", true, "", "An `http://` or `https://` URL."),
                input(
                    "method",
                    "string",
                    false,
                    "`GET`",
                    "`GET`, `POST`, `PUT`, `PATCH`, `DELETE`, `HEAD` or `OPTIONS`, in any case.",
                ),
                input(
                    "headers",
                    "object",
                    false,
                    "",
                    "Header names and values; a value that is not a string is sent as its JSON \
                     text.",
                ),
                input(
                    "query",
                    "object",
                    false,
                    "",
                    "Query parameters added to `url`; values as for `headers`.",
                ),
                input(
                    "body",
                    "any JSON value",
                    false,
                    "",
                    "A string is sent as it is; any other value as JSON, with \
                     `Content-Type: application/json` unless `headers` sets a content type.",
                ),
                input(
                    "expect_status",
                    "integer or array of integers",
                    false,
                    "any 2xx",
                    "The status codes that count as success; any other fails the attempt.",
                ),
                input(
                    "follow_redirects",
                    "boolean",
                    false,
                    "`false`",
                    "Follow up to 5 redirects. Without it a redirect is the answer (and fails \
                     the attempt unless `expect_status` lists its code).",
                ),
                input(
                    "timeout_ms",
                    "integer",
                    false,
                    "`30000`",
                    "Longest the exchange may take, redirects and body included; never longer \
                     than the step's `timeoutMs`.",
                ),
            ],
            output:
                "`{\"status\": <code>, \"headers\": {<lowercase name>: <value>}, \"body\": …}`. \
                     The body is parsed when the answer's `Content-Type` contains `json`, and is \
                     text otherwise; a body over 1 MiB fails the attempt."
                    .into(),
            example: r#"- id: notify
  action: http.request
  timeoutMs: 15000
  retry:
    maxAttempts: 3
  with:
    method: POST
    url: https://chat.example.com/hooks/orders
    headers:
      Authorization: "Bearer {{ secrets.chat.token }}"
    query:
      channel: orders
    body:
      text: "Order {{ trigger.payload.order_id }}: run {{ run.id }} of {{ workflow.name }}"
    expect_status: [200, 204]
"#,
        },
        ActionDoc {
            action: Action::Transform,
            summary: "Builds a value from the context: its output is `value`, rendered.",
            details: "Useful to reshape data once for several later steps, or to give a \
                      workflow a result."
                .into(),
            inputs: vec![input(
                "value",
                "any JSON value",
                true,
                "",
                "The output; its strings may hold templates.",
            )],
            output: "The rendered `value`.".into(),
            example: r#"- id: summary
  action: transform
  with:
    value:
      order: "{{ trigger.payload.order_id }}"
      customer: "{{ trigger.payload.customer_id }}"
      source: "flowline run {{ run.id }}"
"#,
        },
        ActionDoc {
            action: Action::Delay,
            summary: "Sleeps for a number of milliseconds.",
            details: "The step holds its task (or its Job) while it sleeps; for long pauses \
                      use `wait`, which holds nothing."
                .into(),
            inputs: vec![input(
                "ms",
                "integer",
                true,
                "",
                "How long to sleep, in milliseconds (0 or more).",
            )],
            output: "`{\"slept_ms\": <ms>}`.".into(),
            example: r#"- id: pause
  action: delay
  with:
    ms: 2000
"#,
        },
        ActionDoc {
            action: Action::Fail,
            summary: "Fails the step on purpose.",
            details: "With a `when`, it stops a run whose data is not as expected.".into(),
            inputs: vec![input(
                "message",
                "string",
                false,
                "`the step failed on purpose`",
                "The step's error.",
            )],
            output: "None: the step fails with `message`.".into(),
            example: r#"- id: no-customer
  action: fail
  when: "!trigger.payload.customer_id"
  with:
    message: "order {{ trigger.payload.order_id }} has no customer"
"#,
        },
        ActionDoc {
            action: Action::Container,
            summary: "Runs a container image as a Kubernetes Job.",
            details: "Always a Job in the run's namespace, whatever the executor. The pod runs \
                      under the `restricted` Pod Security Standard: non-root (UID 65532), a \
                      read-only root filesystem with a writable `/tmp`, no capabilities, no \
                      ServiceAccount token. Secrets reach it only through `env`."
                .into(),
            inputs: vec![
                input("image", "string", true, "", "The image to run."),
                input(
                    "command",
                    "array of strings",
                    false,
                    "the image's entrypoint",
                    "Replaces the image's entrypoint.",
                ),
                input(
                    "args",
                    "array of strings",
                    false,
                    "the image's command",
                    "Arguments of the command.",
                ),
                input(
                    "env",
                    "object",
                    false,
                    "",
                    "Environment variables, name to value (not a string: its JSON text). A \
                     value that is exactly `{{ secrets.<name>.<key> }}` becomes a reference to \
                     the Secret's key; a secret anywhere else (inside a longer value, in \
                     `image`, `command` or `args`) fails the step.",
                ),
            ],
            output: "The JSON the container writes to `/dev/termination-log` (`{}` when it \
                     writes nothing; Kubernetes keeps at most 4 KiB of it). A non-zero exit \
                     fails the attempt with that text, or with the exit code."
                .into(),
            example: r#"- id: render-invoice
  action: container
  timeoutMs: 300000
  with:
    image: registry.example.com/invoice-renderer:1.4
    command: ["/app/render"]
    args: ["--order", "{{ trigger.payload.order_id }}"]
    env:
      SHOP_TOKEN: "{{ secrets.shop-api.token }}"
      LOCALE: en-GB
"#,
        },
        ActionDoc {
            action: Action::Wait,
            summary: "Waits for a duration, or until a time.",
            details: "Executed by the engine itself: no task and no Job while it waits. When \
                      every step that could make progress waits, the run is parked: it stays \
                      `running` and costs nothing but its Run object. Not allowed with \
                      `forEach`."
                .into(),
            inputs: vec![
                input(
                    "ms",
                    "integer",
                    false,
                    "",
                    format!(
                        "Milliseconds to wait from the step's start, {year}. Exactly one of \
                         `ms` and `until`."
                    ),
                ),
                input(
                    "until",
                    "string",
                    false,
                    "",
                    "An RFC 3339 time (`2026-01-01T09:00:00Z`), often a template; at most a \
                     year away. A time in the past ends the wait at once.",
                ),
            ],
            output: "`{\"waited_until\": <RFC 3339 time>}`.".into(),
            example: r#"- id: hold
  action: wait
  with:
    until: "{{ trigger.payload.ship_after }}"
"#,
        },
        ActionDoc {
            action: Action::Approval,
            summary: "Waits for a person to approve or reject.",
            details: "Decided with `POST /v1/runs/{id}/steps/{step}/approve` (or `/reject`), in \
                      the console, or by appending `{stepId, decision, by, comment}` to the \
                      Run's `spec.approvals`. Parks like `wait`; not allowed with `forEach`."
                .into(),
            inputs: vec![input(
                "timeout_ms",
                "integer",
                false,
                "no timeout",
                format!(
                    "Milliseconds from the step's start to decide in, from 1, {year}; no \
                     decision by then fails the step (`approval timed out after <n> ms`)."
                ),
            )],
            output: "`{\"approved\": true, \"comment\": …, \"by\": …, \"at\": …}` once approved. \
                     A rejection fails the step, and so the run: `rejected by <by> at <time>: \
                     <comment>`."
                .into(),
            example: r#"- id: approve
  action: approval
  when: "trigger.payload.priority != 'standard'"
  with:
    timeout_ms: 86400000
"#,
        },
        ActionDoc {
            action: Action::Workflow,
            summary: "Starts a run of another workflow (a child run) and, by default, waits \
                      for its result.",
            details: format!(
                "The child runs the workflow's current version, with `trigger: workflow`, \
                 `parent_run_id` and `parent_step_id`; the step records its `child_run_id` \
                 (under `forEach`, one child per element, at most {children}; with `wait`, \
                 at most `forEachConcurrency` of them run at once, and without `wait` all \
                 start at once). The workflow \
                 must be of the same account and `draft` or `active`. With `wait`, the step \
                 parks like `wait` until the child ends: a failed child fails the step \
                 (`child run <id> failed: …`) and `retry` starts a new child. Cancelling or \
                 timing out the parent cancels its unfinished children. Calls nest at most \
                 {depth} deep (deeper: `workflow call depth exceeds {depth}`).",
                children = crate::engine::subworkflow::MAX_CHILDREN_PER_STEP,
                depth = crate::engine::subworkflow::MAX_CALL_DEPTH,
            ),
            inputs: vec![
                input(
                    "workflow",
                    "string",
                    true,
                    "",
                    "The id of the workflow to start; may be a template.",
                ),
                input(
                    "payload",
                    "object",
                    false,
                    "`{}`",
                    "The child's trigger payload (`trigger.payload.*` in its steps).",
                ),
                input(
                    "wait",
                    "boolean",
                    false,
                    "`true`",
                    "Wait for the child to end. `false`: the step succeeds once the child \
                     is created.",
                ),
            ],
            output: "With `wait`: `{\"run_id\": …, \"status\": \"succeeded\", \"output\": <the \
                     child's output>}`. Without: `{\"run_id\": …}`."
                .into(),
            example: r#"- id: invoice
  action: workflow
  with:
    workflow: wf-invoice
    payload:
      order: "{{ trigger.payload.order_id }}"
"#,
        },
        ActionDoc {
            action: Action::Callback,
            summary: "Waits until its single-use URL is called with a JSON body.",
            details: "The URL is `{{ callbacks.<id>.url }}`, renderable in every step of the run, \
                      also before this one: an `http.request` step hands it to a third party, \
                      which answers with `POST <url>` and a JSON body (no API key: the token in \
                      the URL is the credential). The first call completes the step (a call \
                      that comes before the step starts waiting is kept for it); a second gets \
                      409 `callback_used`, a made-up or expired token 404 \
                      `callback_not_found`. Parks like `wait`; not allowed with `forEach`."
                .into(),
            inputs: vec![input(
                "timeout_ms",
                "integer",
                false,
                "no timeout",
                format!(
                    "Milliseconds from the step's start to be called in, from 1, {year}; no \
                     call by then fails the step (`callback timed out after <n> ms`)."
                ),
            )],
            output: "The body of the call, as sent.".into(),
            example: r#"- id: paid
  action: callback
  with:
    timeout_ms: 3600000
"#,
        },
        ActionDoc {
            action: Action::WaitForEvent,
            summary: "Waits for an event posted to `POST /v1/events`.",
            details: "The first event of that name posted after the step started whose `match` \
                      holds completes it (the event's `resumed` lists the run). `match` is an \
                      expression like `when`, over `event.id`, `event.name`, `event.payload`, \
                      `trigger.*` and the finished steps' `steps.<id>.output`. Parks like \
                      `wait`; not allowed with `forEach`."
                .into(),
            inputs: vec![
                input(
                    "event",
                    "string",
                    true,
                    "",
                    "The event name (`^[a-z0-9][a-z0-9._-]{0,127}$`).",
                ),
                input(
                    "match",
                    "string",
                    false,
                    "every event of that name",
                    "An expression the event must satisfy.",
                ),
                input(
                    "timeout_ms",
                    "integer",
                    false,
                    "no timeout",
                    "Milliseconds from the step's start, from 1 to 2592000000 (30 days); no \
                     matching event by then fails the step (`timed out waiting for event \
                     <name>`).",
                ),
            ],
            output: "`{\"event_id\": …, \"payload\": <the event's payload>}`.".into(),
            example: r#"- id: shipped
  action: wait_for_event
  with:
    event: order.shipped
    match: "event.payload.order_id == trigger.payload.order_id"
    timeout_ms: 604800000
"#,
        },
    ]
}
