//! A run's concurrency group: the workflow's `concurrency.key` template rendered over
//! the run's trigger. Pure.

use serde_json::{Value, json};

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

/// The group of `run` under the key template `key` (none: the whole workflow). A value
/// that is not a string is grouped by its JSON text.
pub fn render(key: Option<&str>, run: &Run) -> Result<String, String> {
    let Some(key) = key else {
        return Ok(WORKFLOW_GROUP.to_string());
    };
    match template::render_str(key, &context(run)) {
        Ok(Value::String(s)) => Ok(s),
        Ok(other) => Ok(other.to_string()),
        Err(e) => Err(format!("concurrency key could not be rendered: {e}")),
    }
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
