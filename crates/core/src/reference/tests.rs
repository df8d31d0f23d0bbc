use std::path::PathBuf;

use serde_json::{Value, json};

use super::*;
use crate::crd::{Action, Run, Step, Workflow};
use crate::engine::spec_check;

/// The schema of `kind`.
fn root(kind: &str) -> Value {
    kinds()
        .into_iter()
        .find(|k| k.names.kind == kind)
        .map(|k| k.root)
        .expect("every kind has a CRD")
}

/// Parses a YAML document or list as JSON.
fn yaml(text: &str) -> Result<Value, String> {
    serde_saphyr::from_str(text).map_err(|e| e.to_string())
}

/// What is wrong with the example workflow and Run: they must be valid manifests
/// (schema and Rust types), pass the spec check, and every template, `forEach`, `when`
/// and concurrency key must evaluate against the example context.
fn example_problems() -> Vec<String> {
    let mut problems = Vec::new();
    // The workflow.
    match yaml(examples::WORKFLOW) {
        Ok(value) => schema::check(&value, &root("Workflow"), "", &mut problems),
        Err(e) => problems.push(format!("example workflow: {e}")),
    }
    let workflow: Workflow = match serde_saphyr::from_str(examples::WORKFLOW) {
        Ok(wf) => wf,
        Err(e) => {
            problems.push(format!("example workflow: {e}"));
            return problems;
        }
    };
    for problem in crate::engine::spec_check::workflow(&workflow.spec) {
        problems.push(format!("example workflow: {problem}"));
    }
    let ctx = examples::context();
    for step in &workflow.spec.steps {
        problems.extend(step_problems(step, &ctx));
    }
    if let Some(output) = &workflow.spec.output {
        let mut whole = ctx.clone();
        whole["steps"]["confirm"] =
            serde_json::json!({"status": "succeeded", "output": {"message": "shipped"}});
        if let Err(e) = template::render_in(output, &whole, "output") {
            problems.push(format!("example output: {e}"));
        }
    }
    if let Some(key) = workflow
        .spec
        .concurrency
        .as_ref()
        .and_then(|c| c.key.as_deref())
        && let Err(e) = template::render_str(key, &examples::key_context())
    {
        problems.push(format!("example concurrency.key: {e}"));
    }
    // The run.
    match yaml(RUN_EXAMPLE) {
        Ok(value) => schema::check(&value, &root("Run"), "", &mut problems),
        Err(e) => problems.push(format!("example run: {e}")),
    }
    if let Err(e) = serde_saphyr::from_str::<Run>(RUN_EXAMPLE) {
        problems.push(format!("example run: {e}"));
    }
    problems
}

/// What fails when `step` is executed against `ctx`: its `with`, `forEach` and `when`.
fn step_problems(step: &Step, ctx: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let at = format!("step {}", step.id);
    if let Some(with) = &step.with {
        match template::render(with, ctx) {
            Ok(rendered) if step.action.is_waiting_kind() => {
                let now = examples::NOW.parse().expect("a time");
                if let Err(e) = waiting::wake_at(step.action, &rendered, now) {
                    problems.push(format!("{at}: {e}"));
                }
            }
            Ok(rendered) if step.action == crate::crd::Action::Workflow => {
                if let Err(e) = crate::engine::subworkflow::inputs(&rendered) {
                    problems.push(format!("{at}: {e}"));
                }
            }
            Ok(_) => {}
            Err(e) => problems.push(format!("{at}: {e}")),
        }
    }
    if let Some(for_each) = &step.for_each {
        match template::render_str(for_each, ctx) {
            Ok(Value::Array(_)) => {}
            Ok(other) => problems.push(format!("{at}: forEach rendered {other}, not an array")),
            Err(e) => problems.push(format!("{at}: forEach: {e}")),
        }
    }
    if let Some(when) = &step.when
        && let Err(e) = expr::evaluate(when, ctx)
    {
        problems.push(format!("{at}: when: {e}"));
    }
    problems
}

fn committed_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(PATH)
}

/// Everything the reference shows that does not work as it says.
fn problems() -> Vec<String> {
    let mut problems = example_problems();
    problems.extend(action_problems());
    problems.extend(template_problems());
    problems.extend(expression_problems());
    problems.extend(variable_problems());
    problems
}

/// `docs/reference/workflow.md` must be what the code generates. With
/// `FLOWLINE_WRITE_REFERENCE` set (`make reference`) the test writes it instead, once
/// every example works.
#[test]
fn reference_is_up_to_date() {
    let generated = markdown();
    let path = committed_path();
    if std::env::var_os("FLOWLINE_WRITE_REFERENCE").is_some() {
        let problems = problems();
        assert!(
            problems.is_empty(),
            "the reference's examples: {problems:#?}"
        );
        std::fs::create_dir_all(path.parent().expect("a folder")).expect("docs/reference");
        std::fs::write(&path, &generated).expect("writing the reference");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{PATH} is stale: run `make reference` and commit the result"
    );
}

#[test]
fn the_reference_is_deterministic() {
    assert_eq!(markdown(), markdown());
}

/// The action table names every action of the CRD schema, once, in the schema's order.
#[test]
fn every_action_is_documented() {
    let root = root("Workflow");
    let names: Vec<&str> = root
        .pointer("/properties/spec/properties/steps/items/properties/action/enum")
        .and_then(Value::as_array)
        .expect("the schema lists the actions")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for name in &names {
        let action: Action = serde_json::from_value(json!(name)).expect("an action");
        assert_eq!(action.as_str(), *name);
    }
    let documented: Vec<&str> = actions::table().iter().map(|d| d.action.as_str()).collect();
    assert_eq!(
        documented, names,
        "crates/core/src/reference/actions.rs must describe every action, in the order of \
         the Action enum"
    );
}

fn action_problems() -> Vec<String> {
    let steps_schema = root("Workflow")
        .pointer("/properties/spec/properties/steps/items")
        .cloned()
        .expect("the schema of a step");
    let ctx = examples::context();
    let mut problems = Vec::new();
    for doc in actions::table() {
        let name = doc.action.as_str();
        let value = match yaml(doc.example) {
            Ok(Value::Array(mut items)) if items.len() == 1 => items.remove(0),
            other => {
                problems.push(format!("{name}: the example is not one step: {other:?}"));
                continue;
            }
        };
        schema::check(&value, &steps_schema, name, &mut problems);
        let step: Step = match serde_json::from_value(value) {
            Ok(step) => step,
            Err(e) => {
                problems.push(format!("{name}: {e}"));
                continue;
            }
        };
        if step.action != doc.action {
            problems.push(format!(
                "{name}: the example is a {} step",
                step.action.as_str()
            ));
        }
        for problem in spec_check::steps(std::slice::from_ref(&step)) {
            problems.push(format!("{name}: {problem}"));
        }
        problems.extend(step_problems(&step, &ctx));
        let with = step.with.clone().unwrap_or_else(|| json!({}));
        let keys: Vec<&String> = with
            .as_object()
            .map(|m| m.keys().collect())
            .unwrap_or_default();
        for key in keys {
            if !doc.inputs.iter().any(|i| i.name == key) {
                problems.push(format!(
                    "{name}: the example's input {key} is not documented"
                ));
            }
        }
        for input in doc.inputs.iter().filter(|i| i.required) {
            if with.get(input.name).is_none() {
                problems.push(format!("{name}: the example lacks {}", input.name));
            }
        }
    }
    problems
}

#[test]
fn action_examples_work() {
    let problems = action_problems();
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn the_example_workflow_and_run_are_valid_and_evaluate() {
    let problems = example_problems();
    assert!(problems.is_empty(), "{problems:#?}");
}

fn template_problems() -> Vec<String> {
    examples::TEMPLATES
        .iter()
        .filter_map(|example| {
            let result = render_example(example.text);
            (result.is_err() != example.fails).then(|| {
                format!(
                    "template {:?} is documented as {} but gives {result:?}",
                    example.text,
                    if example.fails { "failing" } else { "working" }
                )
            })
        })
        .collect()
}

#[test]
fn template_examples_render_as_documented() {
    let problems = template_problems();
    assert!(problems.is_empty(), "{problems:#?}");
}

fn expression_problems() -> Vec<String> {
    let ctx = examples::context();
    examples::EXPRESSIONS
        .iter()
        .filter_map(|example| {
            let result = expr::evaluate(example.text, &ctx);
            (result.is_err() != example.fails).then(|| {
                format!(
                    "expression {:?} is documented as {} but gives {result:?}",
                    example.text,
                    if example.fails { "failing" } else { "working" }
                )
            })
        })
        .collect()
}

#[test]
fn expression_examples_evaluate_as_documented() {
    let problems = expression_problems();
    assert!(problems.is_empty(), "{problems:#?}");
}

/// Every documented variable, its placeholders filled in, resolves in the example
/// context; every root has a variable, and every variable a root.
fn variable_problems() -> Vec<String> {
    let ctx = examples::context();
    let key_ctx = examples::key_context();
    let roots: Vec<&str> = template::ROOTS
        .iter()
        .chain(&template::ITERATION_ROOTS)
        .copied()
        .collect();
    let mut problems = Vec::new();
    for (path, _) in template::VARIABLES {
        let root = path.split('.').next().unwrap_or_default();
        if !roots.contains(&root) {
            problems.push(format!("variable {path}: {root} is not a root"));
        }
        let filled = path
            .replace("<id>", "fetch-order")
            .replace("<name>", "shop-api")
            .replace("<key>", "token");
        let context = if path == "trigger.type" {
            &key_ctx
        } else {
            &ctx
        };
        if let Err(e) = template::lookup(context, &filled) {
            problems.push(format!("variable {path}: {e}"));
        }
    }
    for root in roots {
        if !template::VARIABLES
            .iter()
            .any(|(path, _)| path.split('.').next() == Some(root))
        {
            problems.push(format!(
                "root {root} has no variable in template::VARIABLES"
            ));
        }
    }
    problems
}

#[test]
fn every_template_variable_is_documented_and_resolves() {
    let problems = variable_problems();
    assert!(problems.is_empty(), "{problems:#?}");
}

/// Each listed operator parses; no other operator of up to three punctuation characters
/// does, so one added to the parser without being listed fails here.
#[test]
fn the_operator_list_is_the_parser_s() {
    let listed: Vec<&str> = expr::OPERATORS.iter().map(|(op, _)| *op).collect();
    for op in &listed {
        let expression = match *op {
            "( )" => "(true)".to_owned(),
            "!" => "! true".to_owned(),
            binary => format!("1 {binary} 1"),
        };
        assert!(expr::check(&expression).is_ok(), "{expression}");
    }
    let punctuation: Vec<char> = (b'!'..=b'~')
        .map(char::from)
        // Quotes open string literals, which are values, not operators.
        .filter(|c| c.is_ascii_punctuation() && !matches!(c, '\'' | '"'))
        .collect();
    let mut candidates = Vec::new();
    for a in &punctuation {
        candidates.push(a.to_string());
        for b in &punctuation {
            candidates.push(format!("{a}{b}"));
            for c in &punctuation {
                candidates.push(format!("{a}{b}{c}"));
            }
        }
    }
    assert_eq!(candidates.len(), 30 + 30 * 30 + 30 * 30 * 30);
    for s in &candidates {
        if expr::check(&format!("1 {s} 1")).is_ok() {
            // A binary operator, possibly followed by `!` on its right operand.
            let operator = s.trim_end_matches('!');
            assert!(listed.contains(&operator), "{s:?} is an unlisted operator");
        }
        if expr::check(&format!("{s} true")).is_ok() {
            assert!(s.chars().all(|c| c == '!'), "{s:?} is an unlisted operator");
        }
    }
}

/// The check the examples go through catches what the API server would drop or refuse.
#[test]
fn the_schema_check_catches_mistakes() {
    let root = root("Workflow");
    let check = |manifest: Value| {
        let mut problems = Vec::new();
        schema::check(&manifest, &root, "", &mut problems);
        problems
    };
    let good = json!({"apiVersion": "flowline.io/v1", "kind": "Workflow", "metadata": {"name": "w"},
        "spec": {"name": "W", "steps": [{"id": "a", "action": "delay", "with": {"ms": 1}}]}});
    assert_eq!(check(good), Vec::<String>::new());
    for (bad, expected) in [
        (json!({"spec": {"name": "W", "stpes": []}}), "spec.stpes"),
        (json!({"spec": {"name": "W", "state": "on"}}), "spec.state"),
        (json!({"spec": {"steps": []}}), "name"),
        (
            json!({"spec": {"name": "W", "parallelism": 0}}),
            "spec.parallelism",
        ),
        (
            json!({"spec": {"name": "W", "steps": [{"id": "a", "action": "delay", "retry": {"max": 2}}]}}),
            "spec.steps[0].retry.max",
        ),
        (
            json!({"spec": {"name": "W", "trigger": {"type": "manual", "cron": 5}}}),
            "spec.trigger.cron",
        ),
    ] {
        let problems = check(bad);
        assert!(
            problems.iter().any(|p| p.contains(expected)),
            "{expected}: {problems:?}"
        );
    }
}

/// Every field of every kind has a row, under its own name.
#[test]
fn every_field_has_a_row() {
    let reference = markdown();
    for kind in kinds() {
        let mut stack = vec![
            kind.root["properties"]["spec"].clone(),
            kind.root["properties"]["status"].clone(),
        ];
        while let Some(node) = stack.pop() {
            let node = if node.get("items").is_some() {
                node["items"].clone()
            } else {
                node
            };
            let Some(fields) = node.get("properties").and_then(Value::as_object) else {
                continue;
            };
            for (name, child) in fields {
                assert!(
                    reference.contains(&format!("| `{name}` |")),
                    "{}: no row for {name}",
                    kind.names.kind
                );
                stack.push(child.clone());
            }
        }
    }
}

#[test]
fn anchors_are_unique_and_links_resolve() {
    let reference = markdown();
    let mut anchors: Vec<&str> = reference
        .split("<a id=\"")
        .skip(1)
        .filter_map(|s| s.split('"').next())
        .collect();
    // Headings GitHub anchors by their text.
    for heading in [
        "a-complete-example",
        "workflow",
        "actions",
        "templates",
        "expressions",
        "limits",
        "run",
        "webhook",
        "flowlineevent",
        "apikey",
    ] {
        anchors.push(heading);
    }
    let mut sorted = anchors.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), anchors.len(), "duplicate anchors");
    for link in reference.split("](#").skip(1) {
        let target = link.split(')').next().unwrap_or_default();
        assert!(anchors.contains(&target), "no anchor for #{target}");
    }
}

/// The example context is shown whole, as it is.
#[test]
fn the_context_is_shown_whole() {
    let context = examples::context();
    let shown: Value = serde_json::from_str(&context_json(&context)).expect("JSON");
    assert_eq!(shown, context);
}

/// What `kubectl explain workflow.spec.steps.with` says names every action and each of
/// its documented inputs.
#[test]
fn the_description_of_with_names_every_input() {
    let root = root("Workflow");
    let description = root
        .pointer("/properties/spec/properties/steps/items/properties/with/description")
        .and_then(Value::as_str)
        .expect("a description");
    let table = actions::table();
    // Where each action's list starts: "`http.request`: url, method, …".
    let mut starts: Vec<(usize, &str)> = table
        .iter()
        .map(|doc| {
            let name = doc.action.as_str();
            let at = description
                .find(&format!("`{name}`:"))
                .unwrap_or_else(|| panic!("the description of with does not name {name}"));
            (at, name)
        })
        .collect();
    starts.sort_unstable();
    for (i, (at, name)) in starts.iter().enumerate() {
        let end = starts
            .get(i + 1)
            .map_or(description.len(), |(next, _)| *next);
        let listed = &description[*at..end];
        let doc = table
            .iter()
            .find(|d| d.action.as_str() == *name)
            .expect("listed");
        for input in &doc.inputs {
            assert!(
                listed.contains(input.name),
                "the description of with does not list {name}'s input {}",
                input.name
            );
        }
    }
}
