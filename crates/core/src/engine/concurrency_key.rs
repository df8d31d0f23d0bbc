//! A run's concurrency group: the workflow's `concurrency.key` template rendered over
//! the run's trigger. Pure.

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::template::{self, TemplateError};
use crate::crd::Run;

/// The group of runs a workflow without a key puts every run in.
pub const WORKFLOW_GROUP: &str = "";

/// The template context of a key: only the trigger, so a group is known before any
/// step runs.
fn context(run: &Run) -> Value {
    json!({"trigger": {
        "type": run.spec.trigger,
        "payload": run.spec.payload.clone().unwrap_or_else(|| json!({})),
    }})
}

/// The longest group kept as rendered. A key may render a whole payload (up to the
/// 1 MiB a run's spec may hold), and the operator keeps every unfinished run's group
/// and, in its compact cache, every finished run's: a longer one is kept as
/// `sha256:` and the hex digest of its text, which groups runs exactly as the text does.
const MAX_GROUP_BYTES: usize = 128;

/// The group of `run` under the key template `key` (none: the whole workflow). A value
/// that is not a string is grouped by its JSON text; a text over [`MAX_GROUP_BYTES`] by
/// its digest.
pub fn render(key: Option<&str>, run: &Run) -> Result<String, String> {
    render_as("concurrency key", key, run)
}

/// [`render`] for any key template over the trigger (a rate limit's, a debounce's):
/// `what` names it in the error.
pub fn render_as(what: &str, key: Option<&str>, run: &Run) -> Result<String, String> {
    let Some(key) = key else {
        return Ok(WORKFLOW_GROUP.to_string());
    };
    let group = match template::render_str(key, &context(run)) {
        Ok(Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(e) => return Err(format!("{what} could not be rendered: {e}")),
    };
    if group.len() <= MAX_GROUP_BYTES {
        return Ok(group);
    }
    Ok(format!(
        "sha256:{}",
        hex::encode(Sha256::digest(group.as_bytes()))
    ))
}

/// Whether `key` is a template a workflow may hold: well formed, and reading only
/// `trigger.*`. Paths that a payload may lack are fine; runs without them fail.
pub fn check(key: &str) -> Result<(), String> {
    let text = Value::String(key.to_string());
    if let Some(path) = template::paths(&text)
        .into_iter()
        .find(|p| !p.trim().starts_with("trigger."))
    {
        return Err(format!(
            "may only read the trigger (trigger.payload.*, trigger.type), not \"{}\"",
            path.trim()
        ));
    }
    match template::render_str(key, &json!({"trigger": {"type": "manual", "payload": {}}})) {
        Ok(_) | Err(TemplateError::MissingPath { .. }) => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(payload: Value) -> Run {
        let mut spec: crate::crd::RunSpec =
            serde_json::from_value(json!({"workflowRef": "wf"})).unwrap();
        spec.payload = Some(payload);
        Run::new("r", spec)
    }

    #[test]
    fn no_key_is_one_group_per_workflow() {
        assert_eq!(render(None, &run(json!({}))).unwrap(), WORKFLOW_GROUP);
    }

    #[test]
    fn keys_render_over_the_trigger() {
        let key = Some("{{ trigger.payload.customer }}");
        assert_eq!(
            render(key, &run(json!({"customer": "acme"}))).unwrap(),
            "acme"
        );
        assert_eq!(render(key, &run(json!({"customer": 7}))).unwrap(), "7");
        assert_eq!(
            render(
                Some("c-{{ trigger.payload.customer }}-{{ trigger.type }}"),
                &run(json!({"customer": "a"}))
            )
            .unwrap(),
            "c-a-manual"
        );
    }

    #[test]
    fn a_long_group_is_kept_as_its_digest_and_groups_the_same_runs() {
        let key = Some("{{ trigger.payload }}");
        let big = |c: &str| run(json!({"blob": c.repeat(100_000)}));
        let a = render(key, &big("a")).unwrap();
        assert!(a.starts_with("sha256:") && a.len() == 7 + 64, "{a}");
        assert_eq!(
            render(key, &big("a")).unwrap(),
            a,
            "the same text, the same group"
        );
        assert_ne!(
            render(key, &big("b")).unwrap(),
            a,
            "another text, another group"
        );
        let fits = "x".repeat(MAX_GROUP_BYTES);
        assert_eq!(
            render(Some("{{ trigger.payload.k }}"), &run(json!({"k": fits}))).unwrap(),
            fits,
            "kept as rendered up to the bound"
        );
    }

    #[test]
    fn a_missing_path_is_a_clear_error() {
        let err = render(Some("{{ trigger.payload.customer }}"), &run(json!({}))).unwrap_err();
        assert!(
            err.starts_with("concurrency key could not be rendered"),
            "{err}"
        );
        assert!(err.contains("trigger.payload.customer"), "{err}");
    }

    #[test]
    fn only_well_formed_trigger_templates_pass_the_check() {
        assert!(check("{{ trigger.payload.customer }}").is_ok());
        assert!(check("fixed").is_ok());
        assert!(
            check("{{ steps.a.output }}")
                .unwrap_err()
                .contains("only read the trigger")
        );
        assert!(check("{{ secrets.s.k }}").is_err());
        assert!(check("{{ trigger.payload.x").is_err());
        assert!(check("{{ trigger..x }}").is_err());
    }
}
