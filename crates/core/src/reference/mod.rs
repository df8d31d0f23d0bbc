//! The workflow reference, `docs/reference/workflow.md`, generated from the code:
//!
//! - every field from the CRD schemas ([`crate::crd::all`]), as `kubectl explain` has
//!   them: type, default, bounds, enums, CEL rules and description;
//! - the template variables from [`template::VARIABLES`] and the expression operators
//!   from [`expr::OPERATORS`];
//! - the limits from their constants;
//! - what each built-in action does with its inputs from the one table code cannot
//!   derive, [`actions::table`], which a test keeps naming every action;
//! - every example evaluated by the real engines as it is written out ([`examples`]).
//!
//! `make reference` writes the file (`FLOWLINE_WRITE_REFERENCE=1` on the test that
//! otherwise fails while the file is stale).

mod actions;
mod examples;
mod schema;

use std::fmt::Write;

use serde_json::Value;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionNames;

use crate::crd::{self, MAX_FOR_EACH_ITEMS, MAX_ITERATION_RECORDS, MAX_STEPS};
use crate::engine::{expr, output, template, waiting};
use crate::limits;
use schema::{Tables, cell, one_line, plain};

/// Where the reference is kept, from the repository's root.
pub const PATH: &str = "docs/reference/workflow.md";

/// One kind's names and schema (`openAPIV3Schema`), as JSON.
struct Kind {
    names: CustomResourceDefinitionNames,
    root: Value,
}

/// Every kind Flowline owns, in the order of [`crd::all`].
fn kinds() -> Vec<Kind> {
    crd::all()
        .into_iter()
        .map(|crd| Kind {
            root: crd.spec.versions[0]
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .map(|s| serde_json::to_value(s).expect("a schema serialises"))
                .unwrap_or_default(),
            names: crd.spec.names,
        })
        .collect()
}

/// The whole reference, as Markdown.
pub fn markdown() -> String {
    let kinds = kinds();
    let kind = |name: &str| {
        kinds
            .iter()
            .find(|k| k.names.kind == name)
            .expect("every kind has a CRD")
    };
    let mut out = String::new();
    intro(&mut out);
    example(&mut out);
    let mut tables = Tables::default();
    kind_section(&mut out, &mut tables, kind("Workflow"), WORKFLOW_INTRO);
    actions_section(&mut out);
    templates_section(&mut out);
    expressions_section(&mut out);
    limits_section(&mut out);
    kind_section(&mut out, &mut tables, kind("Run"), RUN_INTRO);
    kind_section(&mut out, &mut tables, kind("Webhook"), WEBHOOK_INTRO);
    kind_section(&mut out, &mut tables, kind("FlowlineEvent"), EVENT_INTRO);
    kind_section(&mut out, &mut tables, kind("ApiKey"), API_KEY_INTRO);
    // One newline at the end, whatever the last section wrote.
    let end = out.trim_end().len();
    out.truncate(end);
    out.push('\n');
    out
}

const WORKFLOW_INTRO: &str = "You write `spec`; the workflow controller writes `status`.";

const RUN_INTRO: &str = "The API, schedules and inbound webhooks create Runs; you can \
    too, with kubectl, by giving `spec.workflowRef` and optionally `spec.payload` \
    (Flowline fills in the rest, [example](#a-complete-example)). Cancel a run by setting \
    `spec.cancel: true`, and decide an approval by appending to `spec.approvals`. The run \
    controller writes `status`.";

const WEBHOOK_INTRO: &str = "You write `spec`; the delivery worker writes `status`.";

const EVENT_INTRO: &str = "`POST /v1/events` creates events (docs/events.md); the event \
    controller writes `status` once it has started the event's runs, and deletes the event \
    after its `--event-retention`.";

const API_KEY_INTRO: &str = "`POST /v1/api-keys` and `flowline api-key create` make keys; \
    the value is shown once and stored nowhere, only its SHA-256 (docs/concepts.md, \
    \"API keys\"). A key cannot be changed: make a new one and delete the old. It has no \
    `status`.";

fn intro(out: &mut String) {
    out.push_str(
        "<!-- Generated from the code by `make reference` (crates/core/src/reference); \
         do not edit by hand. -->\n\n",
    );
    out.push_str("# Workflow reference\n\n");
    out.push_str(
        "A **workflow** is a `Workflow` object (`flowline.io/v1`): a trigger, steps that \
         each run a built-in action, and settings. Each execution is a `Run`; a `Webhook` \
         subscribes a URL to run and workflow events; a `FlowlineEvent` is an event posted \
         to the account; an `ApiKey` is a key of the account's `/v1` API. This page lists \
         every field of the five kinds, every action with its inputs and output, the variables templates \
         read, and the expression language of `when`. The field descriptions are the ones \
         `kubectl explain` prints.\n\n",
    );
    out.push_str(
        "Manifests spell fields in camelCase (`timeoutMs`, `forEach`); the `/v1` API \
         spells the same fields in snake_case (`timeout_ms`, `for_each`). The inputs of an \
         action (`with`) are spelled the same way everywhere.\n\n",
    );
    out.push_str(
        "Every template and expression shown on this page was evaluated by Flowline's own \
         engines when the page was written, and the results are theirs.\n\n",
    );
    out.push_str("- [A complete example](#a-complete-example)\n");
    out.push_str("- [Workflow](#workflow)\n");
    out.push_str("- [Actions](#actions)\n");
    out.push_str("- [Templates](#templates)\n");
    out.push_str("- [Expressions](#expressions)\n");
    out.push_str("- [Limits](#limits)\n");
    out.push_str("- [Run](#run)\n");
    out.push_str("- [Webhook](#webhook)\n");
    out.push_str("- [FlowlineEvent](#flowlineevent)\n");
    out.push_str("- [ApiKey](#apikey)\n\n");
}

/// A minimal Run of the example workflow, as a user creates one with kubectl.
const RUN_EXAMPLE: &str = r#"apiVersion: flowline.io/v1
kind: Run
metadata:
  generateName: order-fulfilment-
  namespace: shop
spec:
  workflowRef: order-fulfilment
  payload:
    order_id: A-1001
    customer_id: 42
    priority: express
"#;

fn example(out: &mut String) {
    out.push_str("## A complete example\n\n");
    out.push_str(
        "An order arrives by a signed webhook. The workflow fetches the order, reserves \
         each of its lines in parallel, asks a person to approve orders above 1000, ships \
         the order and builds a confirmation. Runs of one customer execute one at a \
         time.\n\n",
    );
    let _ = writeln!(out, "```yaml\n{}```\n", examples::WORKFLOW);
    out.push_str(
        "`fetch-order` runs first; `reserve` and `approve` both need only it, so they run \
         side by side; `ship` starts once both have succeeded or been skipped. Besides the \
         webhook, a run can be started by hand: `POST /v1/workflows/order-fulfilment/runs`, \
         the console, or a Run created with kubectl (`kubectl create -f`, since it uses \
         `generateName`):\n\n",
    );
    let _ = writeln!(out, "```yaml\n{RUN_EXAMPLE}```\n");
}

fn kind_section(out: &mut String, tables: &mut Tables, kind: &Kind, intro: &str) {
    let names = &kind.names;
    let root = &kind.root;
    let _ = writeln!(out, "## {}\n", names.kind);
    let _ = writeln!(out, "{}\n", schema::description(root));
    let _ = writeln!(out, "{intro}\n");
    let short = names.short_names.clone().unwrap_or_default().join("`, `");
    let _ = writeln!(
        out,
        "`kubectl get {}` (short name `{short}`) lists them; `kubectl explain {}.spec` \
         describes the fields below.\n",
        names.plural,
        names.singular.as_deref().unwrap_or_default()
    );
    let rules = root
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if !rules.is_empty() {
        out.push_str("Rules checked when the object is written:\n\n");
        for rule in rules {
            let _ = writeln!(out, "- {}", plain(&rule["message"]));
        }
        out.push('\n');
    }
    for field in ["spec", "status"] {
        tables.add(&names.kind, root, field);
        tables.write(out, "###");
    }
}

fn actions_section(out: &mut String) {
    out.push_str("## Actions\n\n");
    out.push_str(
        "A step's `action` names a built-in action; its inputs are the keys of the step's \
         `with`, whose strings may hold [templates](#templates). An input of the wrong kind \
         is refused when the workflow is written through the API, and fails the step \
         otherwise. A step's `retry` and `timeoutMs` apply to the attempts of every action \
         but `wait` and `approval`, which make no attempts (an approval's time limit is its \
         `timeout_ms` input).\n\n",
    );
    out.push_str("| Action | What it does |\n|---|---|\n");
    let table = actions::table();
    for doc in &table {
        let name = doc.action.as_str();
        let _ = writeln!(
            out,
            "| [`{name}`](#{}) | {} |",
            schema::anchor("action", name),
            doc.summary
        );
    }
    out.push('\n');
    for doc in &table {
        let name = doc.action.as_str();
        let _ = writeln!(out, "<a id=\"{}\"></a>\n", schema::anchor("action", name));
        let _ = writeln!(out, "### `{name}`\n");
        let _ = writeln!(out, "{} {}\n", doc.summary, one_line(&doc.details));
        out.push_str("| Input | Type | Required | Default | Description |\n");
        out.push_str("|---|---|---|---|---|\n");
        for input in &doc.inputs {
            let _ = writeln!(
                out,
                "| `{}` | {} | {} | {} | {} |",
                input.name,
                input.type_,
                if input.required { "yes" } else { "no" },
                cell(input.default),
                cell(&one_line(&input.description))
            );
        }
        let _ = writeln!(out, "\n**Output:** {}\n", one_line(&doc.output));
        let _ = writeln!(out, "```yaml\n{}```\n", doc.example);
    }
}

fn templates_section(out: &mut String) {
    out.push_str("## Templates\n\n");
    out.push_str(
        "The strings of a step's `with` may hold templates, `{{ path }}`, each replaced by \
         the value the path names in the run's context. `forEach` is a template too (it \
         must render to an array), and so is `concurrency.key` (which reads only the \
         trigger). So are the strings of the workflow's `output`, rendered once the last \
         step has succeeded with every step's output in its context (but no `secrets`); \
         a path that does not resolve there fails the run, naming `output`.\n\n",
    );
    let _ = writeln!(
        out,
        "- A string that is exactly one template takes the value with its JSON type: a \
         number stays a number, an object an object.\n\
         - Text around templates makes a string; a value that is not a string is written \
         into it as compact JSON.\n\
         - A path is names separated by dots, starting at a root; a name of digits picks \
         an array element, from 0. Names may hold `-` (`steps.fetch-order`).\n\
         - A template only reads a value: there are no filters, defaults or expressions \
         inside the braces. Build values with [`transform`](#action-transform) and decide \
         with [`when`](#expressions).\n\
         - A path that does not resolve fails the step, naming the path; so does reading \
         an output that was too large to keep (`output_truncated`).\n\
         - One step renders at most {} of templates; values nest at most {} levels deep.\n\
         - In YAML, quote a string that starts with `{{{{`: unquoted, YAML reads it as a \
         mapping.\n",
        bytes(template::MAX_RENDERED_BYTES),
        template::MAX_DEPTH
    );
    out.push_str("### Variables\n\n");
    let _ = writeln!(
        out,
        "Paths start at {}; in a `forEach` step also at {}.\n",
        code_list(&template::ROOTS),
        code_list(&template::ITERATION_ROOTS)
    );
    out.push_str("| Variable | Value |\n|---|---|\n");
    for (path, description) in template::VARIABLES {
        let _ = writeln!(out, "| `{path}` | {} |", cell(description));
    }
    out.push('\n');
    out.push_str(
        "A step reads the outputs of the steps before it; in a graph (some step has \
         `needs`), only of the steps it needs, directly or through their needs, so a result \
         never depends on timing. A read of any other step is refused when the workflow is \
         written. `forEach` may read the trigger, the run, the workflow and earlier steps, \
         not `secrets`, `item` or `index`.\n\n",
    );
    out.push_str("### Examples\n\n");
    out.push_str(
        "The examples on this page are evaluated against this context: what step \
         `confirm` of the [example](#a-complete-example) sees in one run (an order of 640: \
         `approve` was skipped), with `item` and `index` as the second iteration of \
         `reserve` has them.\n\n",
    );
    let context = context_json(&examples::context());
    let _ = writeln!(
        out,
        "<a id=\"example-context\"></a>\n\n```json\n{context}\n```\n"
    );
    out.push_str("| Template | Renders to | Note |\n|---|---|---|\n");
    for example in examples::TEMPLATES {
        let result = match render_example(example.text) {
            Ok(value) => format!("`{value}`"),
            Err(e) => format!("fails: {e}"),
        };
        let _ = writeln!(
            out,
            "| `{}` | {} | {} |",
            cell(example.text),
            cell(&result),
            cell(example.note)
        );
    }
    out.push('\n');
}

fn expressions_section(out: &mut String) {
    out.push_str("## Expressions\n\n");
    let _ = writeln!(
        out,
        "A step's `when` is an expression over the same context as templates, without \
         `item` and `index`. When it is falsy the step is skipped: its status is `skipped`, \
         later steps see it with the output `null`, and the steps that need it still run. \
         An expression that cannot be evaluated (a missing path, a comparison of \
         mismatched types) fails the step. The whole expression is parsed when the \
         workflow is written, so a typo is refused even where evaluation would never reach \
         it. At most {} characters, and {} levels of parentheses and `!`. One \
         evaluation may walk at most {} values in its comparisons (a string counts one \
         more per 64 bytes; of two values compared, only the smaller is counted): \
         comparing a whole 1 MiB payload with another value may exceed it, and then the \
         evaluation fails with `expression compares too much data`. The same language and \
         limits apply to an event trigger's `filter`, `cancelOn` and `wait_for_event` \
         matches.\n",
        expr::MAX_LEN,
        expr::MAX_DEPTH,
        expr::MAX_COST
    );
    out.push_str(
        "Quote the expression in YAML (`when: \"...\"`): a plain YAML string cannot start \
         with `!`, `{` or a quote.\n\n",
    );
    out.push_str("### Values\n\n");
    let _ = writeln!(
        out,
        "- `true`, `false` and `null`.\n\
         - Numbers: `42`, `-1.5` (no exponent).\n\
         - Strings, in single or double quotes; inside, `\\` escapes only the quote and \
         itself: `'it\\'s'`.\n\
         - Paths, as in templates, starting at {}; written bare (`trigger.payload.kind`) or \
         as a template (`{{{{ trigger.payload.kind }}}}`).\n\
         - Truthiness, for `!`, `&&`, `||` and a `when` that is a bare value: `false`, \
         `null`, `0`, `\"\"`, `[]` and `{{}}` are falsy; every other value is truthy.\n",
        code_list(&template::ROOTS)
    );
    out.push_str("### Operators\n\n");
    out.push_str("Tightest-binding first:\n\n| Operator | Meaning |\n|---|---|\n");
    for (operator, meaning) in expr::OPERATORS {
        let _ = writeln!(out, "| `{}` | {} |", cell(operator), cell(meaning));
    }
    out.push('\n');
    out.push_str(
        "Comparisons do not chain (`1 < 2 < 3` is an error): join them with `&&`. There \
         are no functions and no arithmetic.\n\n",
    );
    out.push_str("### Examples\n\n");
    out.push_str(
        "Evaluated against the [example context](#example-context):\n\n\
         | Expression | Result | Note |\n|---|---|---|\n",
    );
    for example in examples::EXPRESSIONS {
        let result = match expr::evaluate(example.text, &examples::context()) {
            Ok(value) => format!("`{value}`"),
            Err(e) => format!("fails: {e}"),
        };
        let _ = writeln!(
            out,
            "| `{}` | {} | {} |",
            cell(example.text),
            cell(&result),
            cell(example.note)
        );
    }
    out.push('\n');
}

fn limits_section(out: &mut String) {
    out.push_str("## Limits\n\n| What | Limit |\n|---|---|\n");
    let rows = [
        ("Steps of a workflow", MAX_STEPS.to_string()),
        (
            "Elements a `forEach` renders to",
            MAX_FOR_EACH_ITEMS.to_string(),
        ),
        (
            "Iterations of a step with a record of their own in the Run's status",
            MAX_ITERATION_RECORDS.to_string(),
        ),
        (
            "A Run's payload and its copy of the workflow, together",
            bytes(limits::MAX_RUN_SPEC_BYTES),
        ),
        (
            "Nesting of JSON values (payloads, inputs, outputs)",
            format!("{} levels", limits::MAX_JSON_DEPTH),
        ),
        (
            "A step's output, kept whole (a larger one is kept as a preview, with \
             `outputTruncated: true`, and cannot be read by later steps)",
            bytes(output::MAX_STEP_OUTPUT),
        ),
        (
            "The outputs of one run, together (the oldest large outputs are cut first)",
            bytes(output::MAX_RUN_OUTPUTS),
        ),
        ("Error messages", bytes(limits::MAX_ERROR_BYTES)),
        (
            "Templates rendered by one step",
            bytes(template::MAX_RENDERED_BYTES),
        ),
        (
            "A `when` expression (and a `filter` or `match`)",
            format!(
                "{} characters; {} values walked by its comparisons",
                expr::MAX_LEN,
                expr::MAX_COST
            ),
        ),
        (
            "A `wait`, or an `approval`'s `timeout_ms`",
            format!("{} ms (366 days)", waiting::MAX_WAIT_MS),
        ),
    ];
    for (what, limit) in rows {
        let _ = writeln!(out, "| {what} | {limit} |");
    }
    out.push('\n');
}

/// The context as indented JSON, its roots in the order of [`template::ROOTS`] and
/// [`template::ITERATION_ROOTS`] (the order a reader looks for them in).
fn context_json(context: &Value) -> String {
    let entries: Vec<String> = template::ROOTS
        .iter()
        .chain(&template::ITERATION_ROOTS)
        .filter_map(|root| {
            let value = context.get(*root)?;
            let text = serde_json::to_string_pretty(value).expect("JSON");
            Some(format!("  \"{root}\": {}", text.replace('\n', "\n  ")))
        })
        .collect();
    format!("{{\n{}\n}}", entries.join(",\n"))
}

/// `4 MiB`, `64 KiB`.
fn bytes(n: usize) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} bytes"),
    }
}

/// `` `a`, `b` and `c` ``.
fn code_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("`{i}`")).collect();
    match quoted.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => quoted.concat(),
    }
}

/// A template example as a `with` value renders it.
fn render_example(text: &str) -> Result<Value, template::TemplateError> {
    template::render_str(text, &examples::context())
}

#[cfg(test)]
mod tests;
