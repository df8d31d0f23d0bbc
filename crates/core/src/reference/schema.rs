//! The fields of a CRD schema as Markdown tables, one per object, and a check of a
//! manifest against the same schema (for the reference's examples).

use std::collections::BTreeMap;
use std::fmt::Write;

use serde_json::Value;

/// Fields every object has, described by the API server rather than by the schema.
#[cfg(test)]
const STANDARD_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// The tables of one or more kinds, in the order they are written. An object whose
/// schema was written already (the `steps` a Run copies from its Workflow, the
/// `conditions` of every kind) links to that table instead of repeating it.
#[derive(Default)]
pub struct Tables {
    tables: Vec<Table>,
    /// Fingerprint of an object's schema → (anchor, kind, path) of its table.
    written: BTreeMap<String, (String, String, String)>,
}

struct Table {
    anchor: String,
    path: String,
    description: String,
    rows: Vec<Row>,
    rules: Vec<String>,
}

struct Row {
    name: String,
    type_: String,
    default: String,
    constraints: Vec<String>,
    description: String,
}

impl Tables {
    /// Adds the tables of `kind`'s `field` (`spec` or `status`) of the CRD schema `root`.
    pub fn add(&mut self, kind: &str, root: &Value, field: &str) {
        if let Some(node) = root.pointer(&format!("/properties/{field}")) {
            self.object(kind, field, node);
        }
    }

    /// Writes the tables added since the last call, under `level` (`###`).
    pub fn write(&mut self, out: &mut String, level: &str) {
        for table in self.tables.drain(..) {
            let _ = writeln!(out, "<a id=\"{}\"></a>\n", table.anchor);
            let _ = writeln!(out, "{level} `{}`\n", table.path);
            if !table.description.is_empty() {
                let _ = writeln!(out, "{}\n", table.description);
            }
            out.push_str("| Field | Type | Default | Constraints | Description |\n");
            out.push_str("|---|---|---|---|---|\n");
            for row in &table.rows {
                let _ = writeln!(
                    out,
                    "| `{}` | {} | {} | {} | {} |",
                    row.name,
                    cell(&row.type_),
                    cell(&row.default),
                    cell(&row.constraints.join("; ")),
                    cell(&row.description)
                );
            }
            out.push('\n');
            if !table.rules.is_empty() {
                out.push_str("Rules checked when the object is written:\n\n");
                for rule in &table.rules {
                    let _ = writeln!(out, "- {}", cell(rule));
                }
                out.push('\n');
            }
        }
    }

    /// The table of the object `node` at `path`, written unless an identical one was:
    /// the link to it either way.
    fn object(&mut self, kind: &str, path: &str, node: &Value) -> String {
        let fingerprint = fingerprint(node);
        if let Some((anchor, first_kind, first_path)) = self.written.get(&fingerprint) {
            return if first_kind == kind {
                format!("[`{first_path}`](#{anchor})")
            } else {
                format!("[{first_kind} `{first_path}`](#{anchor})")
            };
        }
        let anchor = anchor(kind, path);
        self.written.insert(
            fingerprint,
            (anchor.clone(), kind.to_owned(), path.to_owned()),
        );
        let index = self.tables.len();
        self.tables.push(Table {
            anchor: anchor.clone(),
            path: path.to_owned(),
            description: description(node),
            rows: Vec::new(),
            rules: rules(node),
        });
        let required: Vec<&str> = node
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut rows = Vec::new();
        for (name, child) in properties(node) {
            let child_path = format!("{path}.{name}");
            let mut constraints = Vec::new();
            if required.contains(&name.as_str()) {
                constraints.push("**required**".to_owned());
            }
            constraints.extend(self::constraints(child));
            rows.push(Row {
                name: name.clone(),
                type_: self.type_of(kind, &child_path, child),
                default: child.get("default").map(inline_value).unwrap_or_default(),
                constraints,
                description: description(child),
            });
        }
        self.tables[index].rows = rows;
        format!("[`{path}`](#{anchor})")
    }

    /// The type column of the field `node` at `path`; an object's table is added.
    fn type_of(&mut self, kind: &str, path: &str, node: &Value) -> String {
        if node.get("properties").is_some() {
            return format!("object ({})", self.object(kind, path, node));
        }
        let preserve = node
            .get("x-kubernetes-preserve-unknown-fields")
            .and_then(Value::as_bool)
            == Some(true);
        match node.get("type").and_then(Value::as_str) {
            Some("array") => {
                let items = node.get("items").unwrap_or(&Value::Null);
                if items.get("properties").is_some() {
                    let link = self.object(kind, &format!("{path}[]"), items);
                    format!("array of objects ({link})")
                } else {
                    let item = self.type_of(kind, &format!("{path}[]"), items);
                    match item.as_str() {
                        "string" | "integer" | "number" | "boolean" => format!("array of {item}s"),
                        _ => format!("array of {item}"),
                    }
                }
            }
            Some("object") if preserve => "object (any fields)".to_owned(),
            Some("object") => match node.get("additionalProperties") {
                Some(values) => format!("map of {}", self.type_of(kind, path, values)),
                None => "object".to_owned(),
            },
            Some("string") if node.get("format").and_then(Value::as_str) == Some("date-time") => {
                "timestamp (RFC 3339)".to_owned()
            }
            Some(other) => other.to_owned(),
            None if preserve => "any JSON value".to_owned(),
            None => "any".to_owned(),
        }
    }
}

/// The properties of an object schema, in the schema's (alphabetical) order.
fn properties(node: &Value) -> Vec<(&String, &Value)> {
    node.get("properties")
        .and_then(Value::as_object)
        .map(|p| p.iter().collect())
        .unwrap_or_default()
}

/// What identifies an object's schema whatever the field holding it says about it.
fn fingerprint(node: &Value) -> String {
    let mut node = node.clone();
    if let Some(map) = node.as_object_mut() {
        for key in ["description", "default", "nullable"] {
            map.remove(key);
        }
    }
    node.to_string()
}

/// `workflow-spec-steps-retry` for `spec.steps[].retry` of a Workflow.
pub fn anchor(kind: &str, path: &str) -> String {
    let text = format!("{kind}-{path}").to_lowercase();
    let mut out = String::new();
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_end_matches('-').to_owned()
}

/// The schema's description on one line.
pub fn description(node: &Value) -> String {
    node.get("description")
        .and_then(Value::as_str)
        .map(one_line)
        .unwrap_or_default()
}

pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The CEL rules of an object, by their messages.
fn rules(node: &Value) -> Vec<String> {
    node.get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .map(|rules| {
            rules
                .iter()
                .filter_map(|r| r.get("message").and_then(Value::as_str))
                .map(one_line)
                .collect()
        })
        .unwrap_or_default()
}

/// The bounds a field's value must respect.
fn constraints(node: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let number = |key: &str| node.get(key).and_then(Value::as_f64);
    if let Some(values) = node.get("enum").and_then(Value::as_array) {
        let values: Vec<String> = values
            .iter()
            .filter(|v| !v.is_null())
            .map(|v| format!("`{}`", plain(v)))
            .collect();
        out.push(format!("one of {}", values.join(", ")));
    }
    if let Some(bound) = range(number("minimum"), number("maximum"), "") {
        out.push(bound);
    }
    if let Some(bound) = range(number("minLength"), number("maxLength"), " characters") {
        out.push(bound);
    }
    if let Some(bound) = range(number("minItems"), number("maxItems"), " items") {
        out.push(bound);
    }
    if let Some(pattern) = node.get("pattern").and_then(Value::as_str) {
        out.push(format!("matches `{pattern}`"));
    }
    if let Some(keys) = node
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
    {
        let keys: Vec<String> = keys.iter().map(|k| format!("`{}`", plain(k))).collect();
        out.push(format!("one item per {}", keys.join(" and ")));
    }
    // A list of scalars: the bounds of each item.
    if let Some(items) = node.get("items").filter(|i| i.get("properties").is_none()) {
        out.extend(constraints(items).into_iter().map(|c| format!("each {c}")));
    }
    // An object's own rules are listed under its table.
    if node.get("properties").is_none() {
        out.extend(rules(node));
    }
    out
}

fn range(min: Option<f64>, max: Option<f64>, unit: &str) -> Option<String> {
    let n = |x: f64| {
        if x.fract() == 0.0 && x.abs() < 1e15 {
            format!("{}", x as i64)
        } else {
            format!("{x}")
        }
    };
    match (min, max) {
        (Some(min), Some(max)) => Some(format!("{} to {}{unit}", n(min), n(max))),
        (Some(min), None) => Some(format!("at least {}{unit}", n(min))),
        (None, Some(max)) => Some(format!("at most {}{unit}", n(max))),
        (None, None) => None,
    }
}

/// A string as its text, anything else as compact JSON.
pub fn plain(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A value in a table cell.
fn inline_value(value: &Value) -> String {
    match value {
        Value::String(s) if s.is_empty() => "`\"\"`".to_owned(),
        other => format!("`{}`", plain(other)),
    }
}

/// Text made safe for a table cell.
pub fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// Where `value` breaks the schema `node`: unknown fields (which the API server would
/// drop), missing required fields, wrong types, values outside an enum or a bound.
#[cfg(test)]
pub fn check(value: &Value, node: &Value, at: &str, problems: &mut Vec<String>) {
    let mut problem = |message: String| problems.push(format!("{at}: {message}"));
    if value.is_null() {
        if node.get("nullable").and_then(Value::as_bool) != Some(true) {
            problem("is null".into());
        }
        return;
    }
    let type_ok = match node.get("type").and_then(Value::as_str) {
        Some("object") => value.is_object(),
        Some("array") => value.is_array(),
        Some("string") => value.is_string(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("number") => value.is_number(),
        Some("boolean") => value.is_boolean(),
        _ => true,
    };
    if !type_ok {
        problem(format!("is not of type {}", node["type"]));
        return;
    }
    if let Some(values) = node.get("enum").and_then(Value::as_array)
        && !values.contains(value)
    {
        problem(format!(
            "{value} is not one of {}",
            Value::Array(values.clone())
        ));
    }
    let size = match value {
        Value::String(s) => Some((s.chars().count() as f64, "minLength", "maxLength")),
        Value::Array(items) => Some((items.len() as f64, "minItems", "maxItems")),
        Value::Number(n) => n.as_f64().map(|x| (x, "minimum", "maximum")),
        _ => None,
    };
    if let Some((measure, min, max)) = size {
        let bound = |key: &str| node.get(key).and_then(Value::as_f64);
        if bound(min).is_some_and(|b| measure < b) || bound(max).is_some_and(|b| measure > b) {
            problem(format!("{value} is out of bounds"));
        }
    }
    if let Value::Array(items) = value
        && let Some(schema) = node.get("items")
    {
        for (i, item) in items.iter().enumerate() {
            check(item, schema, &format!("{at}[{i}]"), problems);
        }
        return;
    }
    let Value::Object(fields) = value else {
        return;
    };
    let top = at.is_empty();
    let known = node.get("properties").and_then(Value::as_object);
    let preserve = node
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true);
    for required in node
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !fields.contains_key(required) {
            problems.push(format!("{at}: misses the required field {required}"));
        }
    }
    for (name, field) in fields {
        let path = if top {
            name.clone()
        } else {
            format!("{at}.{name}")
        };
        if top && STANDARD_FIELDS.contains(&name.as_str()) {
            continue;
        }
        match known.and_then(|k| k.get(name)) {
            Some(schema) => check(field, schema, &path, problems),
            None => match node.get("additionalProperties") {
                Some(schema) => check(field, schema, &path, problems),
                None if preserve => {}
                None => problems.push(format!("{path}: is not a field of the schema")),
            },
        }
    }
}
