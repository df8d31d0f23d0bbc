//! `{{ path }}` templates in step inputs, rendered against the run's JSON context.
//!
//! A path that does not resolve is always an error: a silently empty URL, header or token is
//! much harder to debug than a step that fails naming the path.

use serde_json::Value;

/// The top-level keys of the template context.
pub const ROOTS: [&str; 6] = [
    "trigger",
    "steps",
    "run",
    "workflow",
    "secrets",
    "callbacks",
];

/// The keys an iteration of a `forEach` step adds to its context: the element and its
/// position. Templates may name them; only a `forEach` step's `with` may read them
/// (`engine::spec_check`).
pub const ITERATION_ROOTS: [&str; 2] = ["item", "index"];

/// Every variable of the context, under [`ROOTS`] and [`ITERATION_ROOTS`], with a
/// one-line description: what the workflow reference lists (`crate::reference`).
/// `<id>`, `<name>` and `<key>` stand for a step id, a Secret name and one of its keys.
pub const VARIABLES: [(&str, &str); 15] = [
    (
        "trigger.payload",
        "The run's payload: the JSON object the run was started with (`{}` without one).",
    ),
    (
        "trigger.headers",
        "A run started by an inbound webhook: the headers `content-type`, `user-agent`, \
         `webhook-id` and `webhook-timestamp` of its request; `{}` for other runs.",
    ),
    (
        "trigger.event",
        "A run started by an event (`POST /v1/events`): `{\"id\", \"name\"}` of that event; \
         absent for other runs.",
    ),
    (
        "trigger.scheduled_at",
        "A run started by a schedule (or a backfill): the RFC 3339 time of its tick; absent \
         for other runs.",
    ),
    (
        "trigger.type",
        "`manual`, `schedule`, `webhook` or `event`; only in `concurrency.key`.",
    ),
    ("run.id", "The run's name (the Run's `metadata.name`)."),
    (
        "callbacks.<id>.url",
        "The single-use URL that completes the `callback` step `<id>` (`POST` a JSON body to \
         it); renderable in every step of the run, also before that step.",
    ),
    ("workflow.id", "The workflow's name (`metadata.name`)."),
    (
        "workflow.name",
        "The workflow's display name (`spec.name`) in the version the run executes.",
    ),
    (
        "steps.<id>.output",
        "The output of step `<id>`: an earlier step, or in a graph a step this one needs \
         (directly or through its needs).",
    ),
    (
        "steps.<id>.status",
        "`succeeded`, or `skipped` (its `when` was false; its output is then `null`).",
    ),
    (
        "steps.<id>.output_truncated",
        "True when the output was too large to keep whole; reading the output then fails.",
    ),
    (
        "secrets.<name>.<key>",
        "Key `<key>` of the Secret `<name>` in the run's namespace, if the Secret carries \
         the label `flowline.io/workflow-access: \"true\"`; redacted wherever it would show.",
    ),
    ("item", "In a `forEach` step: the current element."),
    (
        "index",
        "In a `forEach` step: the position of the current element, from 0.",
    ),
];

/// Budget for bytes produced by templates in one render: a few hundred small templates that each
/// copy a large step output would otherwise multiply into gigabytes.
pub const MAX_RENDERED_BYTES: usize = 4 * 1024 * 1024;

/// Nesting limit of rendered values: the shared JSON limit, for `with` as written and for
/// what a template puts into it (a whole-template string takes the nesting of its value).
pub const MAX_DEPTH: usize = crate::limits::MAX_JSON_DEPTH;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("template path \"{path}\" not found")]
    MissingPath { path: String },
    #[error(
        "template path \"{path}\" has an unknown root \
         (expected trigger, steps, run, workflow, secrets or callbacks)"
    )]
    UnknownRoot { path: String },
    #[error(
        "invalid template path \"{path}\" (expected dot-separated names such as \
         steps.fetch.output.items.0.id)"
    )]
    InvalidPath { path: String },
    #[error(
        "cannot read template path \"{path}\": the output of step \"{step}\" was truncated \
         (too large to keep)"
    )]
    TruncatedOutput { step: String, path: String },
    /// `position` counts characters from the start of the string, starting at 0.
    #[error("unterminated template: \"{{{{\" at position {position} has no closing \"}}}}\"")]
    Unterminated { position: usize },
    #[error("empty template \"{{{{ }}}}\"")]
    EmptyExpression,
    #[error("templates rendered more than {limit} bytes")]
    TooLarge { limit: usize },
    #[error("nesting deeper than {limit}")]
    TooDeep { limit: usize },
    /// Where in the rendered value the error happened, e.g. `with.headers.Authorization`.
    #[error("{location}: {error}")]
    At {
        location: String,
        error: Box<TemplateError>,
    },
}

impl TemplateError {
    /// The error without its location.
    pub fn inner(&self) -> &TemplateError {
        match self {
            TemplateError::At { error, .. } => error.inner(),
            other => other,
        }
    }
}

/// Renders every string in a step's `with`; errors are located from `with`.
pub fn render(value: &Value, ctx: &Value) -> Result<Value, TemplateError> {
    render_in(value, ctx, "with")
}

/// Like [`render`], with errors located from `location` (no location when empty).
pub fn render_in(value: &Value, ctx: &Value, location: &str) -> Result<Value, TemplateError> {
    Renderer::new(ctx).value(value, &mut location.to_owned(), 0)
}

/// Renders one string: exactly one template keeps the value's JSON type, anything else
/// interpolates into a string.
pub fn render_str(s: &str, ctx: &Value) -> Result<Value, TemplateError> {
    Renderer::new(ctx).string(s, 0)
}

/// Every template path in the strings of `value`, in order, without resolving any: how the
/// engine learns which Secrets a step refers to before it reads them. A malformed string
/// contributes the paths before its first error; rendering reports that error. Walks with an
/// explicit stack, so no nesting can exhaust the call stack.
pub fn paths(value: &Value) -> Vec<&str> {
    let mut found = Vec::new();
    let mut stack = vec![value];
    while let Some(value) = stack.pop() {
        match value {
            Value::String(s) => {
                let mut from = 0;
                while let Some(open) = s[from..].find("{{").map(|i| from + i) {
                    let Ok((path, after)) = template_at(s, open) else {
                        break;
                    };
                    found.push(path);
                    from = after;
                }
            }
            // Reversed so that paths come out in document order.
            Value::Array(items) => stack.extend(items.iter().rev()),
            Value::Object(map) => stack.extend(map.values().rev()),
            _ => {}
        }
    }
    found
}

/// One template string as written, parsed without a context (see [`parse`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed<'a> {
    /// Where the string is, as rendering errors name it, e.g. `with.headers.Authorization`.
    pub location: String,
    /// The paths of its templates, in order, each well formed; up to the error if any.
    pub paths: Vec<&'a str>,
    /// The first error rendering would meet whatever the context holds: a malformed
    /// template or path, an unknown root, or nesting too deep.
    pub error: Option<TemplateError>,
}

/// Every string of `value` that holds a template (or that rendering could not reach,
/// for nesting), located from `location` as [`render_in`] locates its errors, with what
/// rendering would find out without a context. Everything reported here fails every
/// render; a missing or truncated path depends on the run and is not looked at. How a
/// workflow's `with` is checked before any run (`engine::spec_check`).
pub fn parse<'a>(value: &'a Value, location: &str) -> Vec<Parsed<'a>> {
    let mut found = Vec::new();
    parse_into(value, &mut location.to_owned(), 0, &mut found);
    found
}

/// As [`Renderer::value`] walks, so locations and the depth limit are the same; the
/// limit bounds the recursion.
fn parse_into<'a>(
    value: &'a Value,
    location: &mut String,
    depth: usize,
    found: &mut Vec<Parsed<'a>>,
) {
    let is_container = value.is_array() || value.is_object();
    if is_container && depth >= MAX_DEPTH {
        found.push(Parsed {
            location: location.clone(),
            paths: Vec::new(),
            error: Some(TemplateError::TooDeep { limit: MAX_DEPTH }),
        });
        return;
    }
    match value {
        Value::String(s) if s.contains("{{") => {
            let (paths, error) = parse_str(s);
            found.push(Parsed {
                location: location.clone(),
                paths,
                error,
            });
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = location.len();
                location.push_str(&format!("[{i}]"));
                parse_into(item, location, depth + 1, found);
                location.truncate(len);
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                let len = location.len();
                push_key(location, key);
                parse_into(item, location, depth + 1, found);
                location.truncate(len);
            }
        }
        _ => {}
    }
}

/// The well-formed paths of the templates in `s`, up to its first error.
fn parse_str(s: &str) -> (Vec<&str>, Option<TemplateError>) {
    let mut paths = Vec::new();
    let mut from = 0;
    while let Some(open) = s[from..].find("{{").map(|i| from + i) {
        let parsed = template_at(s, open).and_then(|(path, after)| {
            check_path(path)?;
            Ok((path, after))
        });
        match parsed {
            Ok((path, after)) => {
                paths.push(path);
                from = after;
            }
            Err(e) => return (paths, Some(e)),
        }
    }
    (paths, None)
}

/// Whether `path` is one that [`lookup`] can resolve in some context: dot-separated
/// names under a known root.
fn check_path(path: &str) -> Result<(), TemplateError> {
    let invalid =
        |s: &str| s.is_empty() || s.chars().any(|c| c.is_whitespace() || c == '{' || c == '}');
    if path.split('.').any(invalid) {
        return Err(TemplateError::InvalidPath {
            path: path.to_owned(),
        });
    }
    if !path
        .split('.')
        .next()
        .is_some_and(|root| ROOTS.contains(&root) || ITERATION_ROOTS.contains(&root))
    {
        return Err(TemplateError::UnknownRoot {
            path: path.to_owned(),
        });
    }
    Ok(())
}

/// Resolves a dot-separated path such as `steps.fetch.output.items.0.id`.
pub fn lookup<'a>(ctx: &'a Value, path: &str) -> Result<&'a Value, TemplateError> {
    check_path(path)?;
    resolve(ctx, path)
}

/// [`lookup`] of a path whose syntax and root the caller has checked already (an
/// expression's paths are checked when it is parsed, against its own roots).
pub fn resolve<'a>(ctx: &'a Value, path: &str) -> Result<&'a Value, TemplateError> {
    let segments: Vec<&str> = path.split('.').collect();
    if let ["steps", step, "output", ..] = segments.as_slice()
        && is_truncated(ctx, step)
    {
        return Err(TemplateError::TruncatedOutput {
            step: (*step).to_owned(),
            path: path.to_owned(),
        });
    }
    segments.iter().try_fold(ctx, |current, segment| {
        child(current, segment).ok_or_else(|| TemplateError::MissingPath {
            path: path.to_owned(),
        })
    })
}

/// The key is `output_truncated`; `outputTruncated` is accepted too because that is how a
/// serialized `StepStatus` spells it.
fn is_truncated(ctx: &Value, step: &str) -> bool {
    let Some(step) = ctx.get("steps").and_then(|steps| steps.get(step)) else {
        return false;
    };
    ["output_truncated", "outputTruncated"]
        .iter()
        .any(|key| step.get(key) == Some(&Value::Bool(true)))
}

fn child<'a>(value: &'a Value, segment: &str) -> Option<&'a Value> {
    match value {
        Value::Object(map) => map.get(segment),
        // Digits only: `usize::from_str` would also accept "+1".
        Value::Array(items) if segment.bytes().all(|b| b.is_ascii_digit()) => {
            segment.parse::<usize>().ok().and_then(|i| items.get(i))
        }
        _ => None,
    }
}

struct Renderer<'a> {
    ctx: &'a Value,
    budget: usize,
}

impl<'a> Renderer<'a> {
    fn new(ctx: &'a Value) -> Self {
        Renderer {
            ctx,
            budget: MAX_RENDERED_BYTES,
        }
    }

    fn value(
        &mut self,
        value: &Value,
        location: &mut String,
        depth: usize,
    ) -> Result<Value, TemplateError> {
        let at = |error: TemplateError, location: &str| {
            if location.is_empty() {
                error
            } else {
                TemplateError::At {
                    location: location.to_owned(),
                    error: Box::new(error),
                }
            }
        };
        // `depth` containers enclose `value`; an array or object adds one more level.
        let is_container = value.is_array() || value.is_object();
        if is_container && depth >= MAX_DEPTH {
            return Err(at(TemplateError::TooDeep { limit: MAX_DEPTH }, location));
        }
        match value {
            Value::String(s) => self.string(s, depth).map_err(|e| at(e, location)),
            Value::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    let len = location.len();
                    location.push_str(&format!("[{i}]"));
                    out.push(self.value(item, location, depth + 1)?);
                    location.truncate(len);
                }
                Ok(Value::Array(out))
            }
            Value::Object(map) => {
                let mut out = serde_json::Map::new();
                for (key, item) in map {
                    let len = location.len();
                    push_key(location, key);
                    out.insert(key.clone(), self.value(item, location, depth + 1)?);
                    location.truncate(len);
                }
                Ok(Value::Object(out))
            }
            other => Ok(other.clone()),
        }
    }

    /// Renders a string that `depth` containers enclose.
    fn string(&mut self, s: &str, depth: usize) -> Result<Value, TemplateError> {
        let Some(mut open) = s.find("{{") else {
            return Ok(Value::String(s.to_owned()));
        };
        let mut out = String::with_capacity(s.len());
        let mut rest = 0;
        loop {
            let (path, after) = template_at(s, open)?;
            let value = lookup(self.ctx, path)?;
            if open == 0 && after == s.len() {
                if depth + crate::limits::json_depth(value) > MAX_DEPTH {
                    return Err(TemplateError::TooDeep { limit: MAX_DEPTH });
                }
                self.charge(json_len(value))?;
                return Ok(value.clone());
            }
            out.push_str(&s[rest..open]);
            match value {
                Value::String(text) => {
                    self.charge(text.len())?;
                    out.push_str(text);
                }
                other => {
                    let json = other.to_string();
                    self.charge(json.len())?;
                    out.push_str(&json);
                }
            }
            rest = after;
            match s[rest..].find("{{") {
                Some(next) => open = rest + next,
                None => break,
            }
        }
        out.push_str(&s[rest..]);
        Ok(Value::String(out))
    }

    fn charge(&mut self, bytes: usize) -> Result<(), TemplateError> {
        self.budget = self
            .budget
            .checked_sub(bytes)
            .ok_or(TemplateError::TooLarge {
                limit: MAX_RENDERED_BYTES,
            })?;
        Ok(())
    }
}

/// The trimmed path of the template opening at byte `open`, and the byte just past its `}}`.
fn template_at(s: &str, open: usize) -> Result<(&str, usize), TemplateError> {
    let body = open + 2;
    let Some(close) = s[body..].find("}}").map(|i| body + i) else {
        return Err(TemplateError::Unterminated {
            position: s[..open].chars().count(),
        });
    };
    let path = s[body..close].trim();
    if path.is_empty() {
        return Err(TemplateError::EmptyExpression);
    }
    Ok((path, close + 2))
}

/// Keys that could be mistaken for path syntax are quoted, e.g. `with.headers["X.Y"]`.
fn push_key(location: &mut String, key: &str) {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '-');
    if plain {
        if !location.is_empty() {
            location.push('.');
        }
        location.push_str(key);
    } else {
        location.push_str(&format!("[{key:?}]"));
    }
}

/// Size of the compact JSON, measured without building it.
fn json_len(value: &Value) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // Serializing a `Value` into a writer that never fails cannot fail; if it somehow did, the
    // value counts as over budget.
    serde_json::to_writer(&mut counter, value).map_or(usize::MAX, |()| counter.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ctx() -> Value {
        json!({
            "trigger": {"payload": {
                "a": {"b": 42},
                "name": "Ada",
                "flag": true,
                "nothing": null,
                "items": [{"name": "first"}, {"name": "second"}],
                "ratio": 1.5
            }},
            "steps": {
                "fetch": {"output": {"body": {"id": 7}}, "output_truncated": true},
                "check-a": {"output": {"status": "ok", "tags": ["x", "y"]}}
            },
            "run": {"id": "run-123"},
            "workflow": {"id": "wf-1"},
            "secrets": {"api-key": {"token": "s3cr3t"}}
        })
    }

    fn err(s: &str) -> TemplateError {
        render_str(s, &ctx()).expect_err(s)
    }

    #[test]
    fn whole_template_keeps_number() {
        assert_eq!(
            render_str("{{ trigger.payload.a.b }}", &ctx()),
            Ok(json!(42))
        );
        assert_eq!(
            render_str("{{trigger.payload.ratio}}", &ctx()),
            Ok(json!(1.5))
        );
    }

    #[test]
    fn whole_template_keeps_object_and_array() {
        assert_eq!(
            render_str("{{ trigger.payload.a }}", &ctx()),
            Ok(json!({"b": 42}))
        );
        assert_eq!(
            render_str("{{ steps.check-a.output.tags }}", &ctx()),
            Ok(json!(["x", "y"]))
        );
    }

    #[test]
    fn whole_template_keeps_bool_and_null() {
        assert_eq!(
            render_str("{{ trigger.payload.flag }}", &ctx()),
            Ok(json!(true))
        );
        assert_eq!(
            render_str("{{ trigger.payload.nothing }}", &ctx()),
            Ok(Value::Null)
        );
    }

    #[test]
    fn whitespace_inside_braces_is_optional() {
        for s in [
            "{{run.id}}",
            "{{ run.id }}",
            "{{   run.id\t}}",
            "{{\n run.id \n}}",
        ] {
            assert_eq!(render_str(s, &ctx()), Ok(json!("run-123")), "{s}");
        }
    }

    #[test]
    fn text_around_a_template_interpolates_to_a_string() {
        assert_eq!(
            render_str("hi {{ trigger.payload.name }}, run {{run.id}}!", &ctx()),
            Ok(json!("hi Ada, run run-123!"))
        );
        // Whitespace outside the braces counts as surrounding text.
        assert_eq!(
            render_str(" {{ trigger.payload.a.b }} ", &ctx()),
            Ok(json!(" 42 "))
        );
        assert_eq!(
            render_str("{{run.id}}{{workflow.id}}", &ctx()),
            Ok(json!("run-123wf-1"))
        );
    }

    #[test]
    fn interpolated_non_strings_are_compact_json() {
        assert_eq!(
            render_str(
                "a={{ trigger.payload.a }} f={{ trigger.payload.flag }} n={{ trigger.payload.nothing }}",
                &ctx()
            ),
            Ok(json!(r#"a={"b":42} f=true n=null"#))
        );
        assert_eq!(
            render_str("r={{ trigger.payload.ratio }}", &ctx()),
            Ok(json!("r=1.5"))
        );
    }

    #[test]
    fn strings_without_templates_are_unchanged() {
        for s in ["", "plain text", "a } b }} c", "{ not { a template }"] {
            assert_eq!(render_str(s, &ctx()), Ok(json!(s)));
        }
    }

    #[test]
    fn renders_nested_objects_and_arrays_and_keeps_other_values() {
        let with = json!({
            "url": "https://x/{{ trigger.payload.a.b }}",
            "body": {"id": "{{ steps.check-a.output.status }}", "all": ["{{ trigger.payload.a }}", 3]},
            "count": 5, "on": false, "none": null
        });
        assert_eq!(
            render(&with, &ctx()),
            Ok(json!({
                "url": "https://x/42",
                "body": {"id": "ok", "all": [{"b": 42}, 3]},
                "count": 5, "on": false, "none": null
            }))
        );
    }

    #[test]
    fn array_indices_in_paths() {
        assert_eq!(
            render_str("{{ trigger.payload.items.1.name }}", &ctx()),
            Ok(json!("second"))
        );
        assert_eq!(
            render_str("{{ steps.check-a.output.tags.0 }}", &ctx()),
            Ok(json!("x"))
        );
        for path in [
            "trigger.payload.items.2",
            "trigger.payload.items.-1",
            "trigger.payload.items.+1",
        ] {
            assert_eq!(
                lookup(&ctx(), path),
                Err(TemplateError::MissingPath { path: path.into() })
            );
        }
    }

    #[test]
    fn missing_path_names_the_full_path() {
        let e = err("id={{ steps.check-a.output.body.id }}");
        assert_eq!(
            e.to_string(),
            r#"template path "steps.check-a.output.body.id" not found"#
        );
        // Descending into a scalar is missing too.
        let e = err("{{ trigger.payload.name.first }}");
        assert_eq!(
            e,
            TemplateError::MissingPath {
                path: "trigger.payload.name.first".into()
            }
        );
        // A known root absent from the context.
        let e = lookup(&json!({}), "secrets.x.y").expect_err("no secrets");
        assert_eq!(
            e,
            TemplateError::MissingPath {
                path: "secrets.x.y".into()
            }
        );
    }

    #[test]
    fn unknown_root_names_the_path() {
        let e = err("{{ trigger2.payload }}");
        assert_eq!(
            e,
            TemplateError::UnknownRoot {
                path: "trigger2.payload".into()
            }
        );
        assert!(e.to_string().contains("\"trigger2.payload\""), "{e}");
    }

    #[test]
    fn invalid_paths_are_rejected() {
        for (s, path) in [
            ("{{ a..b }}", "a..b"),
            ("{{ .run }}", ".run"),
            ("{{ run. }}", "run."),
            ("{{ run id }}", "run id"),
            ("{{ run {{ id }}", "run {{ id"),
        ] {
            assert_eq!(
                err(s),
                TemplateError::InvalidPath { path: path.into() },
                "{s}"
            );
        }
    }

    #[test]
    fn truncated_step_output_cannot_be_read() {
        let e = err("{{ steps.fetch.output.body.id }}");
        assert_eq!(
            e,
            TemplateError::TruncatedOutput {
                step: "fetch".into(),
                path: "steps.fetch.output.body.id".into()
            }
        );
        assert_eq!(
            e.to_string(),
            "cannot read template path \"steps.fetch.output.body.id\": the output of step \"fetch\" \
             was truncated (too large to keep)"
        );
        assert!(matches!(
            err("{{ steps.fetch.output }}"),
            TemplateError::TruncatedOutput { .. }
        ));
        // The flag itself stays readable, and the camelCase spelling is honoured.
        assert_eq!(
            render_str("{{ steps.fetch.output_truncated }}", &ctx()),
            Ok(json!(true))
        );
        let camel = json!({"steps": {"s": {"output": {"a": 1}, "outputTruncated": true}}});
        assert!(matches!(
            lookup(&camel, "steps.s.output.a"),
            Err(TemplateError::TruncatedOutput { .. })
        ));
        let kept = json!({"steps": {"s": {"output": {"a": 1}, "output_truncated": false}}});
        assert_eq!(lookup(&kept, "steps.s.output.a"), Ok(&json!(1)));
    }

    #[test]
    fn unterminated_template_reports_its_position() {
        assert_eq!(err("a {{ b"), TemplateError::Unterminated { position: 2 });
        assert_eq!(err("{{"), TemplateError::Unterminated { position: 0 });
        // Positions count characters, not bytes.
        assert_eq!(
            err("é {{ run.id }} ü {{ x }"),
            TemplateError::Unterminated { position: 17 }
        );
        assert_eq!(
            err("a {{ b").to_string(),
            "unterminated template: \"{{\" at position 2 has no closing \"}}\""
        );
    }

    #[test]
    fn empty_template_is_an_error() {
        for s in ["{{}}", "{{ }}", "x {{   }} y"] {
            assert_eq!(err(s), TemplateError::EmptyExpression, "{s}");
        }
    }

    #[test]
    fn paths_are_found_without_resolving_them() {
        let with = json!({
            "url": "https://x/{{ trigger.payload.id }}?k={{secrets.crm.key}}",
            "headers": {"A": "{{ secrets.no-such.token }}", "B": "plain"},
            "body": [1, {"deep": [["{{ steps.s.output }}"]]}, "{{ run.id }} {{ broken", "{{ }} {{ run.id }}"]
        });
        let mut found = paths(&with);
        found.sort_unstable();
        // Missing paths are listed; a malformed string yields the paths before its error.
        assert_eq!(
            found,
            vec![
                "run.id",
                "secrets.crm.key",
                "secrets.no-such.token",
                "steps.s.output",
                "trigger.payload.id"
            ]
        );
        assert!(paths(&json!({"n": 3, "s": "no templates"})).is_empty());
        let mut deep = json!("{{ secrets.deep.k }}");
        for _ in 0..1000 {
            deep = json!([deep]);
        }
        assert_eq!(paths(&deep), vec!["secrets.deep.k"]);
    }

    #[test]
    fn secrets_with_dashes_in_the_name() {
        assert_eq!(
            render_str("Bearer {{ secrets.api-key.token }}", &ctx()),
            Ok(json!("Bearer s3cr3t"))
        );
    }

    #[test]
    fn render_errors_name_their_location() {
        let with = json!({"headers": {"Authorization": "Bearer {{ secrets.api.token }}"}});
        let e = render(&with, &ctx()).expect_err("missing secret");
        assert_eq!(
            e.to_string(),
            r#"with.headers.Authorization: template path "secrets.api.token" not found"#
        );
        assert_eq!(
            e.inner(),
            &TemplateError::MissingPath {
                path: "secrets.api.token".into()
            }
        );

        let with = json!({"args": ["ok", "{{ }}"], "odd key": {"a.b": "{{ x"}});
        let e = render(&with, &ctx()).expect_err("empty");
        assert_eq!(e.to_string(), "with.args[1]: empty template \"{{ }}\"");
        let e = render(&json!({"odd key": {"a.b": "{{ x"}}), &ctx()).expect_err("unterminated");
        assert!(
            e.to_string()
                .starts_with(r#"with["odd key"]["a.b"]: unterminated"#),
            "{e}"
        );

        let e = render_in(&json!(["{{ nope }}"]), &ctx(), "").expect_err("unknown root");
        assert!(e.to_string().starts_with("[0]: "), "{e}");
        let e = render_in(&json!("{{ nope }}"), &ctx(), "").expect_err("unknown root");
        assert_eq!(
            e,
            TemplateError::UnknownRoot {
                path: "nope".into()
            }
        );
    }

    #[test]
    fn rendered_output_is_bounded() {
        let big = "x".repeat(MAX_RENDERED_BYTES / 3);
        let ctx = json!({"run": {"big": big, "obj": {"s": big}}});
        let ok = json!(["{{ run.big }}", "{{ run.big }}"]);
        assert!(render(&ok, &ctx).is_ok());
        for too_much in [
            json!([
                "{{ run.big }}",
                "{{ run.big }}",
                "{{ run.obj }}",
                "{{ run.big }}"
            ]),
            json!(["{{ run.big }}{{ run.big }}{{ run.big }}{{ run.big }}"]),
        ] {
            let e = render(&too_much, &ctx).expect_err("over budget");
            assert_eq!(
                e.inner(),
                &TemplateError::TooLarge {
                    limit: MAX_RENDERED_BYTES
                }
            );
        }
    }

    fn nest(levels: usize, inner: Value) -> Value {
        (0..levels).fold(inner, |v, _| json!([v]))
    }

    #[test]
    fn nesting_is_bounded_by_the_shared_limit() {
        assert_eq!(MAX_DEPTH, 32);
        let deep = nest(MAX_DEPTH, json!("{{ run.id }}"));
        assert!(render(&deep, &ctx()).is_ok());
        let deeper = json!({"a": deep});
        let e = render(&deeper, &ctx()).expect_err("too deep");
        assert_eq!(e.inner(), &TemplateError::TooDeep { limit: MAX_DEPTH });
        assert!(e.to_string().ends_with("nesting deeper than 32"), "{e}");
        // An empty container one level too deep counts as well.
        let empty = nest(MAX_DEPTH, json!([]));
        assert!(render(&empty, &ctx()).is_err());
    }

    #[test]
    fn a_template_cannot_build_a_value_deeper_than_the_limit() {
        let mut ctx = ctx();
        ctx["trigger"]["payload"]["deep"] = nest(20, json!(1));
        // 12 levels of `with` around a 20-deep value: at the limit.
        assert!(render(&nest(12, json!("{{ trigger.payload.deep }}")), &ctx).is_ok());
        let e =
            render(&nest(13, json!("{{ trigger.payload.deep }}")), &ctx).expect_err("33 levels");
        assert_eq!(e.inner(), &TemplateError::TooDeep { limit: MAX_DEPTH });
        assert!(e.to_string().starts_with("with[0]"), "located: {e}");
        // Interpolated into a string, a value has no nesting.
        assert!(render(&nest(13, json!("x {{ trigger.payload.deep }}")), &ctx).is_ok());
    }
}
