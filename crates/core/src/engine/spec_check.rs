//! What is wrong with a workflow's spec before any run executes it. Pure.
//!
//! One checker for every way a workflow is written: the API refuses what it finds
//! (`400 validation_error`, each problem on its field) and the workflow controller reports
//! it on the `Ready` condition (reason `InvalidSpec`) for workflows applied with kubectl or
//! GitOps. It parses with the engine's own parsers ([`expr::check`], [`template::parse`]),
//! so it refuses exactly what would fail every run, and nothing that could succeed:
//!
//! - a `when` that does not parse;
//! - a template in `with` that does not parse (unterminated, empty, a malformed path or
//!   an unknown root), or `with` nested deeper than the JSON limit;
//! - `needs` naming an unknown step, the step itself or a step twice, or forming a cycle
//!   ([`graph::problems`]);
//! - a path `steps.<id>…` (in `with` or `when`) where `<id>` is not a step whose output
//!   the step can see: in a sequential workflow (no `needs` anywhere) an earlier step; in
//!   a graph an ancestor through `needs`, so a result never depends on timing;
//! - a `concurrency.key` the engine could not render ([`concurrency_key::check`]);
//! - an `output` template that does not parse, or that reads what the run's final
//!   context does not hold: `secrets` (any key that may read runs reads the output),
//!   `item` and `index`, or `steps.<id>` of a step the workflow does not have
//!   ([`output`]);
//! - a built-in action's inputs it cannot do without, where they are written as literals
//!   (a template is judged at run time): `http.request` without an `http(s)` `url`, or
//!   with a `method` that is none of GET, POST, PUT, PATCH, DELETE, HEAD and OPTIONS
//!   (the methods the API documents); `transform` without `value`; `delay` without a
//!   non-negative integer `ms`; `container` without an `image`; `wait` without exactly
//!   one of `ms` (at most a year) and `until` (an RFC 3339 time); `approval` with a
//!   `timeout_ms` that is not from 1 ms to a year ([`action_inputs`]).
//!
//! What depends on a run's data (a missing path, a truncated output, a comparison of
//! mismatched types, a Secret that is not readable) is left to run time. The executor
//! plays no part: a `container` step runs as a Job under either executor, and built-in
//! actions render the same templates in both.

use std::fmt;

use super::concurrency_key;
use super::expr;
use super::graph::{self, Graph};
use super::template;
use super::waiting::MAX_WAIT_MS;
use crate::crd::{Action, Step, Trigger, TriggerType, WorkflowSpec};
use serde_json::Value;

/// One problem, on the field it is about: `steps[2].when`, `steps[1].with.url`,
/// `concurrency.key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub path: String,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Every problem of a workflow's spec, in the order of the spec.
pub fn workflow(spec: &WorkflowSpec) -> Vec<Problem> {
    let mut problems = trigger(&spec.trigger);
    problems.extend(steps(&spec.steps));
    if let Some(key) = spec.concurrency.as_ref().and_then(|c| c.key.as_deref())
        && let Err(message) = concurrency_key::check(key)
    {
        problems.push(Problem {
            path: "concurrency.key".into(),
            message,
        });
    }
    if let Some(value) = &spec.output {
        problems.extend(output(value, &spec.steps));
    }
    problems.extend(cancel_on(&spec.cancel_on));
    if let Some(limit) = &spec.rate_limit {
        problems.extend(rate_limit(limit));
    }
    if let Some(debounce) = &spec.debounce {
        problems.extend(self::debounce(debounce));
    }
    problems
}

/// A problem at `path` unless `n` is within `range`, named in `unit`.
fn bounded(
    path: &str,
    n: u64,
    range: std::ops::RangeInclusive<u64>,
    what: &str,
) -> Option<Problem> {
    (!range.contains(&n)).then(|| Problem {
        path: path.into(),
        message: format!(
            "must be an integer from {} to {} ({what})",
            range.start(),
            range.end()
        ),
    })
}

/// The problems of a key template of flow control at `path`: too long, or reading
/// more than the trigger (the check of a concurrency key).
fn flow_key(path: &str, key: Option<&str>) -> Option<Problem> {
    let key = key?;
    let message = if key.trim().is_empty() || key.chars().count() > crate::crd::MAX_CONCURRENCY_KEY
    {
        format!(
            "must be a template of 1 to {} characters",
            crate::crd::MAX_CONCURRENCY_KEY
        )
    } else {
        concurrency_key::check(key).err()?
    };
    Some(Problem {
        path: path.into(),
        message,
    })
}

/// Every problem of a workflow's `rate_limit` (the API's names for its fields).
pub fn rate_limit(limit: &crate::crd::RateLimit) -> Vec<Problem> {
    use crate::crd::{MAX_RATE_LIMIT, MAX_RATE_PERIOD_MS, MIN_RATE_PERIOD_MS};
    [
        flow_key("rate_limit.key", limit.key.as_deref()),
        bounded(
            "rate_limit.limit",
            limit.limit.into(),
            1..=MAX_RATE_LIMIT.into(),
            "runs per window",
        ),
        bounded(
            "rate_limit.period_ms",
            limit.period_ms,
            MIN_RATE_PERIOD_MS..=MAX_RATE_PERIOD_MS,
            "milliseconds: 1 second to 24 hours",
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Every problem of a workflow's `debounce` (the API's names for its fields).
pub fn debounce(debounce: &crate::crd::Debounce) -> Vec<Problem> {
    use crate::crd::{MAX_DEBOUNCE_MS, MIN_DEBOUNCE_MS};
    let mut problems: Vec<Problem> = [
        flow_key("debounce.key", debounce.key.as_deref()),
        bounded(
            "debounce.period_ms",
            debounce.period_ms,
            MIN_DEBOUNCE_MS..=MAX_DEBOUNCE_MS,
            "milliseconds: 1 second to 7 days",
        ),
    ]
    .into_iter()
    .flatten()
    .collect();
    if let Some(max_wait) = debounce.max_wait_ms {
        let floor = debounce.period_ms.clamp(MIN_DEBOUNCE_MS, MAX_DEBOUNCE_MS);
        problems.extend(bounded(
            "debounce.max_wait_ms",
            max_wait,
            floor..=MAX_DEBOUNCE_MS,
            "milliseconds: at least period_ms, at most 7 days",
        ));
    }
    problems
}

/// Every problem of a workflow's `cancelOn`: more than [`crate::crd::MAX_CANCEL_ON`]
/// entries, an entry's `event` that is not an event name, a `match` that does not parse
/// over `event.*` and `trigger.*` ([`crate::fanout::MATCH_ROOTS`]).
pub fn cancel_on(entries: &[crate::crd::CancelOn]) -> Vec<Problem> {
    let mut problems = Vec::new();
    if entries.len() > crate::crd::MAX_CANCEL_ON {
        problems.push(Problem {
            path: "cancel_on".into(),
            message: format!("at most {} entries", crate::crd::MAX_CANCEL_ON),
        });
    }
    for (i, entry) in entries.iter().enumerate() {
        if !crate::crd::valid_event_name(&entry.event) {
            problems.push(Problem {
                path: format!("cancel_on[{i}].event"),
                message: crate::crd::EVENT_NAME_RULE.into(),
            });
        }
        if let Some(m) = entry.match_.as_deref()
            && let Err(e) = expr::check_over(m, &crate::fanout::MATCH_ROOTS)
        {
            problems.push(Problem {
                path: format!("cancel_on[{i}].match"),
                message: e.to_string(),
            });
        }
    }
    problems
}

/// Every problem of an event trigger: an `event` that is not an event name, a `filter`
/// that does not parse as an expression over `event.*` ([`crate::fanout::FILTER_ROOTS`]).
/// Other triggers have none here (their fields are checked by the CRD's rules and the
/// API's input).
pub fn trigger(trigger: &Trigger) -> Vec<Problem> {
    let mut problems = Vec::new();
    if trigger.type_ != TriggerType::Event {
        return problems;
    }
    match trigger.event.as_deref() {
        Some(name) if crate::crd::valid_event_name(name) => {}
        Some(_) => problems.push(Problem {
            path: "trigger.event".into(),
            message: crate::crd::EVENT_NAME_RULE.into(),
        }),
        None => problems.push(Problem {
            path: "trigger.event".into(),
            message: "is required when trigger.type is event".into(),
        }),
    }
    if let Some(filter) = trigger.filter.as_deref()
        && let Err(e) = expr::check_over(filter, &crate::fanout::FILTER_ROOTS)
    {
        problems.push(Problem {
            path: "trigger.filter".into(),
            message: e.to_string(),
        });
    }
    problems
}

/// Every problem of a workflow's `output` template (`value`) over the workflow's
/// `steps`, each at a path under `output`. It is rendered once the last step has
/// succeeded, with the run's whole context: it may read the trigger, the run, the
/// workflow and any step of the workflow, but not `secrets` (the output is readable by
/// any key that may read runs) nor `item` and `index` (no iteration is running).
pub fn output(value: &Value, steps: &[Step]) -> Vec<Problem> {
    let mut problems = Vec::new();
    for parsed in template::parse(value, "output") {
        let path = parsed.location.clone();
        let mut seen: Vec<&str> = Vec::new();
        for read in &parsed.paths {
            let mut segments = read.split('.');
            let root = segments.next().unwrap_or_default();
            let message = match (root, segments.next()) {
                ("secrets", _) => format!(
                    "\"{read}\": output may not read secrets (any key that may read runs \
                     reads it); copy what is needed into a step's output instead"
                ),
                (root, _) if template::ITERATION_ROOTS.contains(&root) => {
                    format!("\"{read}\" exists only in a step with for_each, once per element")
                }
                ("steps", Some(id)) if !steps.iter().any(|s| s.id == id) => {
                    if seen.contains(&id) {
                        continue;
                    }
                    seen.push(id);
                    format!("\"{read}\" reads step \"{id}\", which this workflow does not have")
                }
                _ => continue,
            };
            problems.push(Problem {
                path: path.clone(),
                message,
            });
        }
        if let Some(e) = parsed.error {
            problems.push(Problem {
                path,
                message: e.to_string(),
            });
        }
    }
    problems
}

/// Every problem of a workflow's steps: their `needs`, then, step by step, its `when`
/// and its `with`.
pub fn steps(steps: &[Step]) -> Vec<Problem> {
    let mut problems: Vec<Problem> = graph::problems(steps)
        .into_iter()
        .map(|p| Problem {
            path: p.path,
            message: p.message,
        })
        .collect();
    let graph = Graph::lenient(steps);
    let scope = |index: usize| Scope {
        steps,
        index,
        visible: graph.ancestors(index),
        parallel: graph.parallel,
    };
    for (index, step) in steps.iter().enumerate() {
        let at = format!("steps[{index}]");
        if let Some(when) = &step.when {
            let path = format!("{at}.when");
            match expr::check(when) {
                Ok(()) => references(&scope(index), &expr::paths(when), &path, &mut problems),
                Err(e) => problems.push(Problem {
                    path,
                    message: e.to_string(),
                }),
            }
        }
        if let Some(for_each) = &step.for_each {
            let value = serde_json::Value::String(for_each.clone());
            for parsed in template::parse(&value, "for_each") {
                let path = format!("{at}.for_each");
                references(&scope(index), &parsed.paths, &path, &mut problems);
                for read in &parsed.paths {
                    let root = read.split('.').next().unwrap_or_default();
                    if root == "secrets" || template::ITERATION_ROOTS.contains(&root) {
                        problems.push(Problem {
                            path: path.clone(),
                            message: format!(
                                "\"{read}\": for_each may read the trigger, the run, the \
                                 workflow and earlier steps, not {root}"
                            ),
                        });
                    }
                }
                if let Some(e) = parsed.error {
                    problems.push(Problem {
                        path,
                        message: e.to_string(),
                    });
                }
            }
        }
        if step.for_each.is_some() && step.action.is_waiting_kind() {
            problems.push(Problem {
                path: format!("{at}.for_each"),
                message: format!(
                    "is not supported on {} steps (one decision or time per step); put the \
                     {0} before or after the forEach step",
                    step.action.as_str()
                ),
            });
        }
        if step.for_each_concurrency.is_some() && step.for_each.is_none() {
            problems.push(Problem {
                path: format!("{at}.for_each_concurrency"),
                message: "is only allowed with for_each".into(),
            });
        }
        action_inputs(step, &format!("{at}.with"), &mut problems);
        let Some(with) = &step.with else { continue };
        for parsed in template::parse(with, "with") {
            let path = format!("{at}.{}", parsed.location);
            references(&scope(index), &parsed.paths, &path, &mut problems);
            if step.action == Action::Workflow
                && let Some(read) = parsed
                    .paths
                    .iter()
                    .find(|p| p.split('.').next() == Some("secrets"))
            {
                problems.push(Problem {
                    path: path.clone(),
                    message: format!(
                        "\"{read}\": a workflow step may not read secrets (its payload is \
                         stored in the child run, which any key that may read runs reads); \
                         let the child workflow read the secret itself"
                    ),
                });
            }
            if step.for_each.is_none()
                && let Some(read) = parsed.paths.iter().find(|p| {
                    template::ITERATION_ROOTS.contains(&p.split('.').next().unwrap_or_default())
                })
            {
                problems.push(Problem {
                    path: path.clone(),
                    message: format!(
                        "\"{read}\" exists only in a step with for_each, once per element"
                    ),
                });
            }
            if let Some(e) = parsed.error {
                problems.push(Problem {
                    path,
                    message: e.to_string(),
                });
            }
        }
    }
    problems
}

/// The methods an `http.request` step may name.
pub const HTTP_METHODS: [&str; 7] = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];

/// Problems of the inputs (`with`, at path `at`) that `step`'s action cannot do without.
/// Values may be templates, rendered at run time: only their presence is checked, and
/// the type and range of literals.
pub fn action_inputs(step: &Step, at: &str, problems: &mut Vec<Problem>) {
    let mut problem = |path: String, message: String| problems.push(Problem { path, message });
    let get = |k: &str| step.with.as_ref().and_then(|w| w.get(k));
    let is_template = |v: &Value| v.as_str().is_some_and(|s| s.contains("{{"));
    match step.action {
        Action::HttpRequest => {
            match get("url") {
                Some(u) if is_template(u) => {}
                Some(Value::String(u))
                    if url::Url::parse(u).is_ok_and(|u| matches!(u.scheme(), "http" | "https")) => {
                }
                _ => problem(
                    format!("{at}.url"),
                    "is required and must be an http(s) URL".into(),
                ),
            }
            if let Some(m) = get("method") {
                let ok = m
                    .as_str()
                    .is_some_and(|m| HTTP_METHODS.contains(&m.to_ascii_uppercase().as_str()));
                if !ok && !is_template(m) {
                    problem(format!("{at}.method"), "must be an HTTP method".into());
                }
            }
        }
        Action::Transform => {
            if get("value").is_none() {
                problem(format!("{at}.value"), "is required".into());
            }
        }
        Action::Delay => match get("ms") {
            Some(v) if v.as_u64().is_some() || is_template(v) => {}
            _ => problem(
                format!("{at}.ms"),
                "is required and must be a non-negative integer".into(),
            ),
        },
        Action::Fail => {}
        Action::Container => match get("image") {
            Some(Value::String(s)) if !s.trim().is_empty() => {}
            _ => problem(format!("{at}.image"), "is required".into()),
        },
        Action::Wait => match (get("ms"), get("until")) {
            (Some(v), None) if v.as_u64().is_some_and(|ms| ms <= MAX_WAIT_MS) || is_template(v) => {
            }
            (Some(_), None) => problem(
                format!("{at}.ms"),
                format!("must be an integer from 0 to {MAX_WAIT_MS} (a year)"),
            ),
            (None, Some(Value::String(u)))
                if u.contains("{{") || u.parse::<jiff::Timestamp>().is_ok() => {}
            (None, Some(_)) => problem(
                format!("{at}.until"),
                "must be an RFC 3339 time (2026-01-01T09:00:00Z) or a template".into(),
            ),
            _ => problem(
                at.to_string(),
                "wait needs exactly one of `ms` and `until`".into(),
            ),
        },
        Action::WaitForEvent => {
            match get("event") {
                Some(Value::String(name)) if crate::crd::valid_event_name(name) => {}
                _ => problem(
                    format!("{at}.event"),
                    format!("is required and {}", crate::crd::EVENT_NAME_RULE),
                ),
            }
            match get("match") {
                None | Some(Value::Null) => {}
                Some(Value::String(m)) => {
                    if let Err(e) = expr::check_over(m, &crate::fanout::WAIT_MATCH_ROOTS) {
                        problem(format!("{at}.match"), e.to_string());
                    }
                }
                Some(_) => problem(
                    format!("{at}.match"),
                    "must be an expression over event, trigger and steps".into(),
                ),
            }
            match get("timeout_ms") {
                None | Some(Value::Null) => {}
                Some(v)
                    if v.as_u64().is_some_and(|ms| {
                        (1..=crate::engine::waiting::MAX_EVENT_WAIT_MS).contains(&ms)
                    }) => {}
                Some(_) => problem(
                    format!("{at}.timeout_ms"),
                    "must be an integer from 1 to 2592000000 (30 days)".into(),
                ),
            }
        }
        Action::Approval | Action::Callback => match get("timeout_ms") {
            None | Some(Value::Null) => {}
            Some(v)
                if v.as_u64().is_some_and(|ms| (1..=MAX_WAIT_MS).contains(&ms))
                    || is_template(v) => {}
            Some(_) => problem(
                format!("{at}.timeout_ms"),
                format!("must be an integer from 1 to {MAX_WAIT_MS} (a year)"),
            ),
        },
        Action::Workflow => {
            match get("workflow") {
                Some(Value::String(id)) if !id.trim().is_empty() => {}
                _ => problem(
                    format!("{at}.workflow"),
                    "is required: the id of the workflow to start".into(),
                ),
            }
            match get("payload") {
                None | Some(Value::Null | Value::Object(_)) => {}
                Some(v) if is_template(v) => {}
                Some(_) => problem(format!("{at}.payload"), "must be an object".into()),
            }
            match get("wait") {
                None | Some(Value::Null | Value::Bool(_)) => {}
                Some(_) => problem(format!("{at}.wait"), "must be true or false".into()),
            }
        }
    }
}

/// What step `index` may read of the others.
struct Scope<'a> {
    steps: &'a [Step],
    index: usize,
    /// The steps whose outputs it sees (earlier steps, or its ancestors in a graph).
    visible: Vec<bool>,
    parallel: bool,
}

/// Problems of the `steps.<id>` references among `paths`, read by the step of `scope`
/// at `at`.
fn references(scope: &Scope<'_>, paths: &[impl AsRef<str>], at: &str, problems: &mut Vec<Problem>) {
    let rule = if scope.parallel {
        "in a graph a step reads only the steps it needs, directly or through their needs"
    } else {
        "a step reads only the steps before it"
    };
    let mut seen: Vec<&str> = Vec::new();
    for path in paths {
        let path = path.as_ref();
        let mut segments = path.split('.');
        let (root, id) = (segments.next(), segments.next());
        // A callback's URL exists from the run's start: any step may read any
        // callback step's, and only `url`.
        if let (Some("callbacks"), Some(id)) = (root, id) {
            let callback = scope
                .steps
                .iter()
                .any(|s| s.id == id && s.action == Action::Callback);
            let message = if !callback {
                format!("\"{path}\": this workflow has no callback step \"{id}\"")
            } else if segments.next() != Some("url") || segments.next().is_some() {
                format!("\"{path}\": a callback step gives only its url (callbacks.{id}.url)")
            } else {
                continue;
            };
            problems.push(Problem {
                path: at.to_owned(),
                message,
            });
            continue;
        }
        let (Some("steps"), Some(id)) = (root, id) else {
            continue;
        };
        if seen.contains(&id) {
            continue;
        }
        seen.push(id);
        let message = match scope.steps.iter().position(|s| s.id == id) {
            Some(position) if scope.visible.get(position) == Some(&true) => continue,
            Some(position) if position == scope.index => {
                format!("\"{path}\" reads this step's own output; {rule}")
            }
            Some(position) if scope.parallel => format!(
                "\"{path}\" reads step \"{id}\" (steps[{position}]), which this step does not \
                 need; {rule}"
            ),
            Some(position) => format!(
                "\"{path}\" reads step \"{id}\", which runs later (steps[{position}]); {rule}"
            ),
            None => format!("\"{path}\" reads step \"{id}\", which this workflow does not have"),
        };
        problems.push(Problem {
            path: at.to_owned(),
            message,
        });
    }
}

/// The problems as one line, for a condition's message; capped as every stored error is
/// ([`crate::limits::cap_error`]).
pub fn summary(problems: &[Problem]) -> String {
    let text = problems
        .iter()
        .map(Problem::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    crate::limits::cap_error(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn spec(steps: Value) -> WorkflowSpec {
        serde_json::from_value(json!({"name": "t", "steps": steps})).unwrap()
    }

    #[test]
    fn rate_limits_and_debounces_are_bounded_and_read_only_the_trigger() {
        let check = |field: &str, value: Value| -> Vec<String> {
            let spec: WorkflowSpec =
                serde_json::from_value(json!({"name": "t", field: value})).unwrap();
            workflow(&spec).into_iter().map(|p| p.path).collect()
        };
        let rows: [(&str, Value, &[&str]); 11] = [
            ("rateLimit", json!({"limit": 1, "periodMs": 1000}), &[]),
            (
                "rateLimit",
                json!({"key": "{{ trigger.payload.c }}", "limit": 10000, "periodMs": 86_400_000}),
                &[],
            ),
            (
                "rateLimit",
                json!({"limit": 0, "periodMs": 1000}),
                &["rate_limit.limit"],
            ),
            (
                "rateLimit",
                json!({"limit": 10001, "periodMs": 999}),
                &["rate_limit.limit", "rate_limit.period_ms"],
            ),
            (
                "rateLimit",
                json!({"limit": 1, "periodMs": 86_400_001}),
                &["rate_limit.period_ms"],
            ),
            (
                "rateLimit",
                json!({"key": "{{ steps.a.output }}", "limit": 1, "periodMs": 1000}),
                &["rate_limit.key"],
            ),
            (
                "debounce",
                json!({"periodMs": 1000, "maxWaitMs": 1000}),
                &[],
            ),
            (
                "debounce",
                json!({"periodMs": 5000, "maxWaitMs": 4999}),
                &["debounce.max_wait_ms"],
            ),
            (
                "debounce",
                json!({"periodMs": 999}),
                &["debounce.period_ms"],
            ),
            (
                "debounce",
                json!({"periodMs": 1000, "maxWaitMs": 604_800_001}),
                &["debounce.max_wait_ms"],
            ),
            (
                "debounce",
                json!({"key": " ", "periodMs": 1000}),
                &["debounce.key"],
            ),
        ];
        for (field, value, paths) in rows {
            assert_eq!(check(field, value.clone()), paths, "{field}: {value}");
        }
    }

    #[test]
    fn an_event_trigger_needs_a_name_and_a_filter_over_event_only() {
        let check = |trigger: Value| -> Vec<String> {
            let spec: WorkflowSpec =
                serde_json::from_value(json!({"name": "t", "trigger": trigger})).unwrap();
            workflow(&spec)
                .into_iter()
                .map(|p| format!("{}: {}", p.path, p.message))
                .collect()
        };
        assert!(check(json!({"type": "event", "event": "order.created"})).is_empty());
        assert!(
            check(json!({"type": "event", "event": "a", "filter": "event.payload.n > 1 && event.id != ''"}))
                .is_empty()
        );
        assert!(check(json!({"type": "manual"})).is_empty());
        for (trigger, expected) in [
            (json!({"type": "event"}), "trigger.event: is required"),
            (
                json!({"type": "event", "event": "Bad"}),
                "trigger.event: must match",
            ),
            (
                json!({"type": "event", "event": "a", "filter": "trigger.payload.n"}),
                "trigger.filter: syntax error at position 0: unknown name 'trigger.payload.n' (paths start with event;",
            ),
            (
                json!({"type": "event", "event": "a", "filter": "event.payload.n >"}),
                "trigger.filter: syntax error",
            ),
        ] {
            let found = check(trigger.clone());
            assert!(
                found.iter().any(|p| p.starts_with(expected)),
                "{trigger}: {found:?}"
            );
        }
    }

    #[test]
    fn cancel_on_entries_need_event_names_and_matches_over_event_and_trigger() {
        let check = |entries: Value| -> Vec<String> {
            let spec: WorkflowSpec =
                serde_json::from_value(json!({"name": "t", "cancelOn": entries})).unwrap();
            workflow(&spec).into_iter().map(|p| p.path).collect()
        };
        assert!(
            check(json!([{"event": "a"}, {"event": "b", "match": "trigger.payload.x == event.payload.x"}]))
                .is_empty()
        );
        assert_eq!(check(json!([{"event": "A"}])), ["cancel_on[0].event"]);
        assert_eq!(
            check(json!([{"event": "a"}, {"event": "b", "match": "steps.x.output"}])),
            ["cancel_on[1].match"]
        );
        let eleven: Vec<Value> = (0..11).map(|i| json!({"event": format!("e{i}")})).collect();
        assert_eq!(check(json!(eleven)), ["cancel_on"]);
    }

    fn problems(steps: Value) -> Vec<(String, String)> {
        workflow(&spec(steps))
            .into_iter()
            .map(|p| (p.path, p.message))
            .collect()
    }

    fn paths(steps: Value) -> Vec<String> {
        problems(steps).into_iter().map(|(path, _)| path).collect()
    }

    #[test]
    fn a_sound_workflow_has_no_problems() {
        let steps = json!([
            {"id": "fetch", "action": "http.request",
             "with": {"url": "https://x/{{ trigger.payload.id }}",
                      "headers": {"Authorization": "Bearer {{ secrets.crm.token }}"}}},
            {"id": "shape", "action": "transform",
             "when": "steps.fetch.output.status == 200 && {{ trigger.payload.on }}",
             "with": {"value": {"all": ["{{ steps.fetch.output.body }}", 3, null],
                                "run": "{{ run.id }} of {{ workflow.id }}", "plain": "a } b"}}},
            {"id": "skip", "action": "fail", "when": "steps.shape.output.missing || false"},
            {"id": "last", "action": "transform",
             "with": {"value": "{{ steps.skip.output }} {{ steps }} {{ trigger.headers }}"}}
        ]);
        assert_eq!(problems(steps), Vec::<(String, String)>::new());
        assert!(workflow(&spec(json!([]))).is_empty());
    }

    #[test]
    fn workflow_steps_need_an_id_an_object_payload_a_boolean_wait_and_no_secrets() {
        let sound = json!([
            {"id": "call", "action": "workflow", "forEach": "{{ trigger.payload.items }}",
             "with": {"workflow": "wf-child", "payload": {"item": "{{ item }}"}, "wait": false}},
            {"id": "later", "action": "workflow",
             "with": {"workflow": "{{ trigger.payload.next }}", "payload": "{{ steps.call.output }}"}}
        ]);
        assert_eq!(problems(sound), Vec::<(String, String)>::new());
        let bad = problems(json!([
            {"id": "a", "action": "workflow"},
            {"id": "b", "action": "workflow", "with": {"workflow": "w", "payload": [1], "wait": "no"}},
            {"id": "c", "action": "workflow",
             "with": {"workflow": "w", "payload": {"t": "{{ secrets.crm.token }}"}}}
        ]));
        let at: Vec<&str> = bad.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            at,
            [
                "steps[0].with.workflow",
                "steps[1].with.payload",
                "steps[1].with.wait",
                "steps[2].with.payload.t"
            ]
        );
        assert!(bad[3].1.contains("may not read secrets"), "{}", bad[3].1);
    }

    #[test]
    fn callback_urls_may_be_read_by_any_step_but_only_of_callback_steps() {
        let sound = json!([
            {"id": "send", "action": "http.request",
             "with": {"url": "https://x/", "body": {"reply_to": "{{ callbacks.paid.url }}"}}},
            {"id": "paid", "action": "callback", "with": {"timeout_ms": 60000}}
        ]);
        assert_eq!(problems(sound), Vec::<(String, String)>::new());
        let bad = problems(json!([
            {"id": "a", "action": "transform", "with": {"value": "{{ callbacks.nope.url }}"}},
            {"id": "b", "action": "transform", "with": {"value": "{{ callbacks.a.url }}"}},
            {"id": "c", "action": "transform", "with": {"value": "{{ callbacks.cb.token }}"}},
            {"id": "cb", "action": "callback", "with": {"timeout_ms": 0}}
        ]));
        let messages: Vec<&str> = bad.iter().map(|(_, m)| m.as_str()).collect();
        assert_eq!(bad.len(), 4, "{bad:?}");
        assert!(
            messages[0].contains("no callback step \"nope\""),
            "{}",
            messages[0]
        );
        assert!(
            messages[1].contains("no callback step \"a\""),
            "{}",
            messages[1]
        );
        assert!(messages[2].contains("only its url"), "{}", messages[2]);
        assert_eq!(bad[3].0, "steps[3].with.timeout_ms");
    }

    #[test]
    fn a_when_that_does_not_parse_is_a_problem_on_its_field() {
        for (when, message) in [
            (
                "trigger.payload.n = 1",
                "syntax error at position 18: expected '==' to compare",
            ),
            (
                "payload.n == 1",
                "syntax error at position 0: unknown name 'payload.n' (paths start with trigger, \
                 steps, run, workflow, secrets or callbacks; quote strings)",
            ),
            ("(true", "syntax error at position 5: expected ')'"),
            (
                "",
                "syntax error at position 0: expected a value, found the end",
            ),
        ] {
            let steps = json!([{"id": "a", "action": "fail"},
                               {"id": "b", "action": "fail", "when": when}]);
            assert_eq!(
                problems(steps),
                [("steps[1].when".to_string(), message.to_string())],
                "{when}"
            );
        }
        let long = format!("true{}", " || true".repeat(200));
        assert_eq!(
            problems(json!([{"id": "a", "action": "fail", "when": long}]))[0].1,
            "expression is 1604 characters long; the limit is 1000"
        );
    }

    #[test]
    fn data_dependent_when_errors_are_left_to_run_time() {
        // Missing paths, truncated outputs and type mismatches depend on the run.
        for when in [
            "trigger.payload.missing.deep",
            "trigger.payload.n < 'x'",
            "true > false",
        ] {
            assert!(
                problems(json!([{"id": "a", "action": "fail", "when": when}])).is_empty(),
                "{when}"
            );
        }
    }

    #[test]
    fn a_template_that_does_not_parse_is_a_problem_on_its_field() {
        let steps = json!([{"id": "call", "action": "http.request", "with": {
            "url": "https://x/{{ trigger.payload.id",
            "method": "GET",
            "headers": {"X-Run": "{{ }}", "X-Ok": "{{ run.id }}", "odd key": "{{ nope.x }}"},
            "body": [1, {"a": "{{ run..id }}"}],
            "query": {"q": "{{ run id }}"}
        }}]);
        assert_eq!(
            problems(steps),
            [
                (
                    "steps[0].with.body[1].a",
                    r#"invalid template path "run..id" (expected dot-separated names such as steps.fetch.output.items.0.id)"#
                ),
                ("steps[0].with.headers.X-Run", r#"empty template "{{ }}""#),
                (
                    r#"steps[0].with.headers["odd key"]"#,
                    r#"template path "nope.x" has an unknown root (expected trigger, steps, run, workflow, secrets or callbacks)"#
                ),
                (
                    "steps[0].with.query.q",
                    r#"invalid template path "run id" (expected dot-separated names such as steps.fetch.output.items.0.id)"#
                ),
                (
                    "steps[0].with.url",
                    r#"unterminated template: "{{" at position 10 has no closing "}}""#
                ),
            ]
            .map(|(p, m)| (p.to_string(), m.to_string()))
        );
    }

    #[test]
    fn problems_name_fields_and_errors_as_a_run_would() {
        // Where the engine's render fails (whatever the context), the same field and
        // message, under the step.
        for with in [
            json!({"args": ["ok", "{{ }}"]}),
            json!({"odd key": {"a.b": "{{ x"}}),
            json!({"headers": {"Authorization": "Bearer {{ secret.api.token }}"}}),
        ] {
            let run_error = template::render(&with, &json!({})).expect_err("fails");
            let found = steps(&spec(json!([{"id": "s", "action": "fail", "with": with}])).steps);
            assert_eq!(found.len(), 1, "{found:?}");
            assert_eq!(found[0].to_string(), format!("steps[0].{run_error}"));
        }
    }

    #[test]
    fn keys_are_not_templates() {
        // The engine renders values only: a key is sent as written.
        assert!(
            problems(json!([{"id": "a", "action": "transform",
                "with": {"value": {"{{ not a template": 1}}}]))
            .is_empty()
        );
    }

    #[test]
    fn with_nested_deeper_than_the_limit_is_a_problem() {
        // `with` is one level: 31 more fit.
        let deep = (0..template::MAX_DEPTH - 1).fold(json!(1), |v, _| json!([v]));
        assert!(
            paths(json!([{"id": "a", "action": "transform", "with": {"value": deep.clone()}}]))
                .is_empty()
        );
        let deeper = json!([deep]);
        let found =
            problems(json!([{"id": "a", "action": "transform", "with": {"value": deeper}}]));
        assert_eq!(found.len(), 1);
        assert!(
            found[0].0.starts_with("steps[0].with.value[0]"),
            "{found:?}"
        );
        assert_eq!(found[0].1, "nesting deeper than 32");
    }

    #[test]
    fn steps_may_read_only_earlier_steps() {
        let steps = json!([
            {"id": "first", "action": "transform",
             "with": {"value": "{{ steps.first.output }}"}},
            {"id": "second", "action": "transform",
             "when": "steps.third.output.ok && steps.first.output.ok",
             "with": {"value": {"a": "{{ steps.ghost.output.x }} and {{ steps.ghost.output.y }}",
                                "b": "{{ steps.first.output }}", "c": "{{ steps.third }}"}}},
            {"id": "third", "action": "fail", "when": "{{ steps.nobody.status }} == 'x'"}
        ]);
        assert_eq!(
            problems(steps),
            [
                (
                    "steps[0].with.value",
                    r#""steps.first.output" reads this step's own output; a step reads only the steps before it"#
                ),
                (
                    "steps[1].when",
                    r#""steps.third.output.ok" reads step "third", which runs later (steps[2]); a step reads only the steps before it"#
                ),
                (
                    "steps[1].with.value.a",
                    r#""steps.ghost.output.x" reads step "ghost", which this workflow does not have"#
                ),
                (
                    "steps[1].with.value.c",
                    r#""steps.third" reads step "third", which runs later (steps[2]); a step reads only the steps before it"#
                ),
                (
                    "steps[2].when",
                    r#""steps.nobody.status" reads step "nobody", which this workflow does not have"#
                ),
            ]
            .map(|(p, m)| (p.to_string(), m.to_string()))
        );
    }

    #[test]
    fn in_a_graph_steps_may_read_only_their_ancestors() {
        let steps = json!([
            {"id": "a", "action": "transform", "with": {"value": 1}},
            {"id": "b", "action": "transform", "needs": ["a"],
             "with": {"value": "{{ steps.a.output }}"}},
            {"id": "c", "action": "transform", "needs": ["a"],
             "with": {"value": "{{ steps.b.output }}"}},
            {"id": "d", "action": "transform", "needs": ["b", "c"],
             "when": "steps.a.output == 1",
             "with": {"value": "{{ steps.c.output }} {{ steps.e.output }}"}},
            // Declared before what it reads: fine, it needs it.
            {"id": "e", "action": "transform", "needs": ["a"],
             "with": {"value": "{{ steps.a.output }}"}},
            {"id": "f", "action": "transform", "needs": ["g"],
             "with": {"value": "{{ steps.g.output }}"}},
            {"id": "g", "action": "transform", "with": {"value": 2}}
        ]);
        assert_eq!(
            problems(steps),
            [
                (
                    "steps[2].with.value",
                    r#""steps.b.output" reads step "b" (steps[1]), which this step does not need; in a graph a step reads only the steps it needs, directly or through their needs"#
                ),
                (
                    "steps[3].with.value",
                    r#""steps.e.output" reads step "e" (steps[4]), which this step does not need; in a graph a step reads only the steps it needs, directly or through their needs"#
                ),
            ]
            .map(|(p, m)| (p.to_string(), m.to_string()))
        );
    }

    #[test]
    fn for_each_is_checked_and_item_is_read_only_where_it_exists() {
        let steps = json!([
            {"id": "list", "action": "transform", "with": {"value": [1, 2]}},
            {"id": "each", "action": "transform", "forEach": "{{ steps.list.output }}",
             "forEachConcurrency": 2, "with": {"value": "{{ item }} at {{ index }}"}},
            {"id": "bad", "action": "transform", "forEach": "{{ item }} {{ secrets.s.k }}",
             "with": {"value": 1}},
            {"id": "later", "action": "transform", "forEach": "{{ steps.nope.output",
             "with": {"value": "{{ item.x }}"}},
            {"id": "plain", "action": "transform", "forEachConcurrency": 3,
             "with": {"value": "{{ item }}"}}
        ]);
        assert_eq!(
            paths(steps),
            [
                "steps[2].for_each",
                "steps[2].for_each",
                "steps[3].for_each",
                "steps[4].for_each_concurrency",
                "steps[4].with.value",
            ]
        );
    }

    #[test]
    fn wait_and_approval_steps_cannot_fan_out() {
        let steps = json!([
            {"id": "ok", "action": "approval", "forEach": "{{ trigger.payload.xs }}"},
            {"id": "nap", "action": "wait", "forEach": "{{ trigger.payload.xs }}", "with": {"ms": 1}},
            {"id": "fine", "action": "approval", "with": {"timeout_ms": 1000}},
        ]);
        assert_eq!(paths(steps), ["steps[0].for_each", "steps[1].for_each"]);
    }

    #[test]
    fn needs_problems_are_problems_of_the_spec() {
        let found = paths(json!([
            {"id": "a", "action": "fail", "needs": ["b"]},
            {"id": "b", "action": "fail", "needs": ["a", "zz"]}
        ]));
        assert_eq!(found, ["steps[1].needs[1]", "steps[1].needs[0]"]);
    }

    #[test]
    fn references_before_a_parse_error_are_checked_too() {
        let found = paths(json!([{"id": "a", "action": "transform",
            "with": {"value": "{{ steps.later.output }} {{ broken"}},
            {"id": "later", "action": "fail"}]));
        assert_eq!(found, ["steps[0].with.value", "steps[0].with.value"]);
    }

    #[test]
    fn container_steps_are_checked_like_any_other_under_either_executor() {
        for executor in [json!("inline"), json!("job"), Value::Null] {
            let mut spec = spec(json!([{"id": "box", "action": "container",
                "with": {"image": "busybox", "env": {"N": "{{ trigger.payload.n }}"}}}]));
            spec.executor = serde_json::from_value(executor).unwrap();
            assert!(workflow(&spec).is_empty());
        }
    }

    #[test]
    fn a_concurrency_key_the_engine_cannot_render_is_a_problem() {
        let with_key = |key: &str| {
            let mut spec = spec(json!([]));
            spec.concurrency =
                Some(serde_json::from_value(json!({"limit": 1, "key": key})).unwrap());
            workflow(&spec)
        };
        assert!(with_key("{{ trigger.payload.customer }}").is_empty());
        let found = with_key("{{ steps.a.output }}");
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].path, "concurrency.key");
        assert!(
            found[0].message.contains("may only read the trigger"),
            "{found:?}"
        );
        assert_eq!(with_key("{{ trigger.payload").len(), 1);
    }

    /// What `/v1` refuses of an action's inputs (400 on the field), kubectl gets here
    /// (`InvalidSpec`): one check for both doors.
    #[test]
    fn inputs_an_action_cannot_do_without_are_problems_on_their_fields() {
        for (step, path, message) in [
            (
                json!({"action": "http.request"}),
                "steps[0].with.url",
                "is required and must be an http(s) URL",
            ),
            (
                json!({"action": "http.request", "with": {"url": "ftp://x.test/"}}),
                "steps[0].with.url",
                "is required and must be an http(s) URL",
            ),
            (
                json!({"action": "http.request", "with": {"url": "not a url"}}),
                "steps[0].with.url",
                "is required and must be an http(s) URL",
            ),
            (
                json!({"action": "http.request", "with": {"url": 7}}),
                "steps[0].with.url",
                "is required and must be an http(s) URL",
            ),
            (
                json!({"action": "http.request", "with": {"url": "https://x.test", "method": "FETCH"}}),
                "steps[0].with.method",
                "must be an HTTP method",
            ),
            (
                json!({"action": "http.request", "with": {"url": "https://x.test", "method": 1}}),
                "steps[0].with.method",
                "must be an HTTP method",
            ),
            (
                json!({"action": "transform"}),
                "steps[0].with.value",
                "is required",
            ),
            (
                json!({"action": "transform", "with": {"val": 1}}),
                "steps[0].with.value",
                "is required",
            ),
            (
                json!({"action": "delay"}),
                "steps[0].with.ms",
                "is required and must be a non-negative integer",
            ),
            (
                json!({"action": "delay", "with": {"ms": -5}}),
                "steps[0].with.ms",
                "is required and must be a non-negative integer",
            ),
            (
                json!({"action": "delay", "with": {"ms": "soon"}}),
                "steps[0].with.ms",
                "is required and must be a non-negative integer",
            ),
            (
                json!({"action": "container"}),
                "steps[0].with.image",
                "is required",
            ),
            (
                json!({"action": "container", "with": {"image": " "}}),
                "steps[0].with.image",
                "is required",
            ),
            (
                json!({"action": "wait"}),
                "steps[0].with",
                "wait needs exactly one of `ms` and `until`",
            ),
            (
                json!({"action": "wait", "with": {"ms": 1, "until": "2026-12-01T09:00:00Z"}}),
                "steps[0].with",
                "wait needs exactly one of `ms` and `until`",
            ),
            (
                json!({"action": "wait", "with": {"ms": MAX_WAIT_MS + 1}}),
                "steps[0].with.ms",
                "must be an integer from 0 to 31622400000 (a year)",
            ),
            (
                json!({"action": "wait", "with": {"ms": -5}}),
                "steps[0].with.ms",
                "must be an integer from 0 to 31622400000 (a year)",
            ),
            (
                json!({"action": "wait", "with": {"until": "tomorrow"}}),
                "steps[0].with.until",
                "must be an RFC 3339 time (2026-01-01T09:00:00Z) or a template",
            ),
            (
                json!({"action": "approval", "with": {"timeout_ms": 0}}),
                "steps[0].with.timeout_ms",
                "must be an integer from 1 to 31622400000 (a year)",
            ),
            (
                json!({"action": "approval", "with": {"timeout_ms": "soon"}}),
                "steps[0].with.timeout_ms",
                "must be an integer from 1 to 31622400000 (a year)",
            ),
        ] {
            let mut step = step;
            step["id"] = json!("s");
            assert_eq!(
                problems(json!([step.clone()])),
                [(path.to_string(), message.to_string())],
                "{step}"
            );
            // The controller's check (Ready=False, InvalidSpec) is this one.
            assert_eq!(
                summary(&workflow(&spec(json!([step])))),
                format!("{path}: {message}")
            );
        }
    }

    #[test]
    fn literal_and_templated_inputs_that_can_work_are_no_problem() {
        for step in [
            json!({"action": "http.request", "with": {"url": "https://x.test/a"}}),
            json!({"action": "http.request", "with": {"url": "http://x.test", "method": "post"}}),
            json!({"action": "http.request", "with": {"url": "{{ trigger.payload.url }}",
                                                      "method": "{{ trigger.payload.m }}"}}),
            json!({"action": "transform", "with": {"value": null}}),
            json!({"action": "delay", "with": {"ms": 0}}),
            json!({"action": "delay", "with": {"ms": "{{ trigger.payload.ms }}"}}),
            json!({"action": "fail"}),
            json!({"action": "container", "with": {"image": "busybox"}}),
            json!({"action": "wait", "with": {"ms": MAX_WAIT_MS}}),
            json!({"action": "wait", "with": {"until": "2026-12-01T09:00:00Z"}}),
            json!({"action": "wait", "with": {"until": "{{ trigger.payload.at }}"}}),
            json!({"action": "approval"}),
            json!({"action": "approval", "with": {"timeout_ms": null}}),
            json!({"action": "approval", "with": {"timeout_ms": 60000}}),
        ] {
            let mut step = step;
            step["id"] = json!("s");
            assert!(problems(json!([step.clone()])).is_empty(), "{step}");
        }
    }

    /// The example workflows the docs point at are sound under every check.
    #[test]
    fn the_examples_have_no_problems() {
        for (name, text) in [
            (
                "approval",
                include_str!("../../../../examples/approval.yaml"),
            ),
            (
                "container-step",
                include_str!("../../../../examples/container-step.yaml"),
            ),
            ("fan-out", include_str!("../../../../examples/fan-out.yaml")),
            (
                "http-relay",
                include_str!("../../../../examples/http-relay.yaml"),
            ),
            (
                "scheduled-report",
                include_str!("../../../../examples/scheduled-report.yaml"),
            ),
        ] {
            let wf: crate::crd::Workflow = serde_saphyr::from_str(text).expect(name);
            assert_eq!(workflow(&wf.spec), [], "{name}");
        }
    }

    fn output_problems(output: Value) -> Vec<(String, String)> {
        let mut spec = spec(json!([
            {"id": "sum", "action": "transform", "with": {"value": 3}},
            {"id": "each", "action": "transform", "forEach": "{{ trigger.payload.xs }}",
             "with": {"value": "{{ item }}"}}
        ]));
        spec.output = Some(output);
        workflow(&spec)
            .into_iter()
            .map(|p| (p.path, p.message))
            .collect()
    }

    #[test]
    fn an_output_reading_the_runs_context_has_no_problems() {
        for output in [
            json!({"total": "{{ steps.sum.output }}", "order": "{{ trigger.payload.order }}",
                   "all": ["{{ steps.each.output }}", "{{ steps.sum.status }}", null, 1],
                   "who": "{{ run.id }} of {{ workflow.id }} ({{ workflow.name }})",
                   "plain": "no template"}),
            json!("{{ steps.sum.output }}"),
            json!(42),
            json!(null),
        ] {
            assert_eq!(output_problems(output.clone()), [], "{output}");
        }
    }

    /// The same problems for `/v1` (400 on `output…`) and for kubectl (`InvalidSpec`).
    #[test]
    fn an_output_reading_what_the_run_does_not_hold_is_a_problem_on_its_field() {
        assert_eq!(
            output_problems(json!({"a": "{{ secrets.crm.token }}",
                                   "b": {"c": "{{ steps.ghost.output }} {{ steps.ghost.status }}"},
                                   "d": ["{{ item }}"],
                                   "e": "{{ steps.sum.output",
                                   "f": "{{ payload.x }}"})),
            [
                (
                    "output.a",
                    r#""secrets.crm.token": output may not read secrets (any key that may read runs reads it); copy what is needed into a step's output instead"#
                ),
                (
                    "output.b.c",
                    r#""steps.ghost.output" reads step "ghost", which this workflow does not have"#
                ),
                (
                    "output.d[0]",
                    r#""item" exists only in a step with for_each, once per element"#
                ),
                (
                    "output.e",
                    r#"unterminated template: "{{" at position 0 has no closing "}}""#
                ),
                (
                    "output.f",
                    r#"template path "payload.x" has an unknown root (expected trigger, steps, run, workflow, secrets or callbacks)"#
                ),
            ]
            .map(|(p, m)| (p.to_string(), m.to_string()))
        );
        // A whole-string template is on `output` itself.
        assert_eq!(
            output_problems(json!("{{ secrets.s.k }}"))[0].0,
            "output".to_string()
        );
        let mut spec = spec(json!([]));
        spec.output = Some(json!({"x": "{{ steps.sum.output }}"}));
        assert_eq!(
            summary(&workflow(&spec)),
            r#"output.x: "steps.sum.output" reads step "sum", which this workflow does not have"#
        );
    }

    #[test]
    fn the_summary_lists_every_problem_within_its_limit() {
        let found = workflow(&spec(json!([
            {"id": "a", "action": "fail", "when": "x"},
            {"id": "b", "action": "transform", "with": {"value": "{{ steps.c.output }}"}}
        ])));
        let text = summary(&found);
        assert!(
            text.starts_with("steps[0].when: syntax error at position 0"),
            "{text}"
        );
        assert!(
            text.contains("; steps[1].with.value: \"steps.c.output\" reads step \"c\""),
            "{text}"
        );
        let many: Vec<Problem> = (0..1000)
            .map(|i| Problem {
                path: format!("steps[{i}].when"),
                message: "x".repeat(50),
            })
            .collect();
        assert!(summary(&many).len() <= crate::limits::MAX_ERROR_BYTES);
    }
}
