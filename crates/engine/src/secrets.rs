//! The one path by which a step reads Secrets, for its `with` templates and its `when`.
//!
//! A step refers to a Secret as `secrets.<name>.<key>`. The names are found with the
//! template and expression parsers (never by scanning text), and each is read only if the
//! Secret opted in with the label `flowline.io/workflow-access: "true"` and is not one of
//! Flowline's own (API keys, webhook signing secrets, the chart's Secrets, and platform
//! credentials). Anything else — including a Secret that does not exist, so that existence
//! is not revealed — fails the step with `secret <name> is not readable by workflows`.
//!
//! Step Jobs never see values in their Pod spec: [`StepSecrets::placeholders`] stands in
//! for them, and the Job maps each placeholder to a `secretKeyRef`.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use serde_json::{Map, Value};

use flowline_core::crd::Step;
use flowline_core::engine::expr;
use flowline_core::engine::template;

/// The label by which a Secret opts in to being read by workflows.
pub const ACCESS_LABEL: &str = "flowline.io/workflow-access";

/// Secret types that hold Flowline's own or the platform's credentials: API keys and
/// webhook signing secrets (`flowline.io/…`), Helm release records (they hold rendered
/// manifests, including the chart's bootstrap admin key), ServiceAccount and bootstrap
/// tokens.
const OWN_TYPE_PREFIX: &str = "flowline.io/";
const PLATFORM_TYPES: [&str; 3] = [
    "helm.sh/release.v1",
    "kubernetes.io/service-account-token",
    "bootstrap.kubernetes.io/token",
];

/// Labels Flowline puts on its own Secrets: API keys, webhook signing secrets, inbound
/// hook secrets.
const OWN_LABELS: [&str; 3] = [
    "flowline.io/api-key",
    "flowline.io/webhook",
    "flowline.io/hook",
];

/// The label (and value) the chart puts on everything it installs, e.g. the bootstrap
/// admin key.
const CHART_LABEL: (&str, &str) = ("app.kubernetes.io/part-of", "flowline");

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("secret {0} is not readable by workflows")]
    NotReadable(String),
    #[error("reading secret {name} failed: {source}")]
    Read {
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// The names of the Secrets a step refers to, in its `with` and its `when`.
pub fn referenced(step: &Step) -> BTreeSet<String> {
    let with = step.with.as_ref().map(template::paths).unwrap_or_default();
    let when = step.when.as_deref().map(expr::paths).unwrap_or_default();
    with.into_iter()
        .chain(when.iter().map(String::as_str))
        .filter_map(secret_name)
        .map(str::to_owned)
        .collect()
}

/// `crm` in `secrets.crm.token`.
fn secret_name(path: &str) -> Option<&str> {
    let mut segments = path.split('.');
    (segments.next() == Some("secrets"))
        .then(|| segments.next())
        .flatten()
        .filter(|name| !name.is_empty())
}

/// Whether workflows may read `secret`. Webhook signing secrets are recognised by their
/// type alone: Flowline signs only with Secrets of type `flowline.io/webhook-secret`.
pub fn readable(secret: &Secret) -> bool {
    opted_in(secret) && !flowline_own(secret)
}

fn opted_in(secret: &Secret) -> bool {
    secret
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(ACCESS_LABEL))
        .is_some_and(|value| value == "true")
}

fn flowline_own(secret: &Secret) -> bool {
    let type_ = secret.type_.as_deref().unwrap_or_default();
    let labels = secret.metadata.labels.clone().unwrap_or_default();
    type_.starts_with(OWN_TYPE_PREFIX)
        || PLATFORM_TYPES.contains(&type_)
        || OWN_LABELS.iter().any(|label| labels.contains_key(*label))
        || labels.get(CHART_LABEL.0).map(String::as_str) == Some(CHART_LABEL.1)
}

/// The Secrets one step read: name → key → value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepSecrets(BTreeMap<String, BTreeMap<String, String>>);

/// Reads the Secrets `step` refers to from `namespace`; no API call when it refers to none.
pub async fn read_for_step(
    client: &Client,
    namespace: &str,
    step: &Step,
) -> Result<StepSecrets, SecretError> {
    let names = referenced(step);
    if names.is_empty() {
        return Ok(StepSecrets::default());
    }
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut read = BTreeMap::new();
    for name in names {
        let secret = api
            .get_opt(&name)
            .await
            .map_err(|source| SecretError::Read {
                name: name.clone(),
                source,
            })?;
        match secret {
            Some(secret) if readable(&secret) => {
                read.insert(name, values(secret));
            }
            // Missing and refused read the same, so a name's existence is not revealed.
            _ => return Err(SecretError::NotReadable(name)),
        }
    }
    Ok(StepSecrets(read))
}

fn values(secret: Secret) -> BTreeMap<String, String> {
    secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(key, bytes)| (key, String::from_utf8_lossy(&bytes.0).into_owned()))
        .collect()
}

impl StepSecrets {
    #[cfg(test)]
    pub fn from_values(values: BTreeMap<String, BTreeMap<String, String>>) -> Self {
        StepSecrets(values)
    }

    /// The `secrets` root of the template context.
    pub fn context(&self) -> Value {
        self.context_with(|_, _, value| value.to_owned())
    }

    /// The `secrets` root of a context for rendering what people read: every value
    /// shown as `[redacted]`.
    pub fn redacted_context(&self) -> Value {
        self.context_with(|_, _, _| flowline_core::engine::redact::REDACTED.to_owned())
    }

    /// Every value read, for the redactor.
    pub fn values(&self) -> impl Iterator<Item = &str> {
        self.0
            .values()
            .flat_map(|keys| keys.values().map(String::as_str))
    }

    /// Fresh placeholders for one attempt in a Job: random (so no input can forge one) and
    /// different for every attempt.
    pub fn placeholders(&self) -> Placeholders {
        let mut refs = BTreeMap::new();
        let context = self.context_with(|name, key, _| {
            let text = format!("flowline-secret-{:032x}", rand::random::<u128>());
            refs.insert(
                text.clone(),
                SecretKeyRef {
                    name: name.to_owned(),
                    key: key.to_owned(),
                },
            );
            text
        });
        Placeholders { context, refs }
    }

    fn context_with(&self, mut leaf: impl FnMut(&str, &str, &str) -> String) -> Value {
        let mut out = Map::new();
        for (name, keys) in &self.0 {
            let keys: Map<String, Value> = keys
                .iter()
                .map(|(key, value)| (key.clone(), Value::String(leaf(name, key, value))))
                .collect();
            out.insert(name.clone(), Value::Object(keys));
        }
        Value::Object(out)
    }
}

/// A key of a Secret, as a Job's `secretKeyRef` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretKeyRef {
    pub name: String,
    pub key: String,
}

/// The placeholders standing in for secret values in one Job attempt's inputs.
#[derive(Debug, Clone, Default)]
pub struct Placeholders {
    context: Value,
    refs: BTreeMap<String, SecretKeyRef>,
}

impl Placeholders {
    /// The `secrets` root of the template context a Job's inputs are rendered with.
    pub fn context(&self) -> &Value {
        &self.context
    }

    /// The Secret key `text` stands for, when it is exactly a placeholder.
    pub fn get(&self, text: &str) -> Option<&SecretKeyRef> {
        self.refs.get(text)
    }

    /// The placeholders that occur in `text`, with the key each stands for.
    pub fn found_in<'a>(
        &'a self,
        text: &'a str,
    ) -> impl Iterator<Item = (&'a str, &'a SecretKeyRef)> + 'a {
        self.refs
            .iter()
            .filter(move |(placeholder, _)| text.contains(placeholder.as_str()))
            .map(|(placeholder, key)| (placeholder.as_str(), key))
    }
}

/// Puts the values back where placeholders stand in the strings of `value` (inside a step
/// Job, after reading them from the environment). `values` maps placeholder → value.
pub fn substitute(value: &mut Value, values: &BTreeMap<String, String>) {
    match value {
        Value::String(s) => {
            for (placeholder, secret) in values {
                if s.contains(placeholder.as_str()) {
                    *s = s.replace(placeholder.as_str(), secret);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| substitute(v, values)),
        Value::Object(map) => map.values_mut().for_each(|v| substitute(v, values)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use serde_json::json;

    fn step(spec: Value) -> Step {
        serde_json::from_value(spec).unwrap()
    }

    fn secret(type_: Option<&str>, labels: &[(&str, &str)]) -> Secret {
        let mut s = Secret {
            type_: type_.map(str::to_owned),
            ..Default::default()
        };
        s.metadata.name = Some("s".into());
        s.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        s
    }

    const OPT_IN: (&str, &str) = (ACCESS_LABEL, "true");

    #[test]
    fn references_come_from_templates_and_when_not_from_text() {
        let s = step(json!({
            "id": "a", "action": "http.request",
            "when": "secrets.flag.on == 'yes' || {{ secrets.other-flag.on }}",
            "with": {
                "url": "https://x/{{ secrets.crm.token }}",
                "headers": {"A": "Bearer {{secrets.api-key.value}}"},
                // Not templates: plain text, a string literal, a whole-root reference.
                "note": "secrets.plain.text is just text",
                "all": "{{ secrets }}",
                "copy": "{{ steps.prev.output.secrets.x.y }}"
            }
        }));
        assert_eq!(
            referenced(&s),
            BTreeSet::from(["api-key", "crm", "flag", "other-flag"].map(String::from))
        );
        let plain = step(json!({"id": "b", "action": "transform", "with": {"value": 1}}));
        assert!(referenced(&plain).is_empty());
        // A string literal in `when` is not a reference.
        let literal =
            step(json!({"id": "c", "action": "transform", "when": "'secrets.a.b' == run.id"}));
        assert!(referenced(&literal).is_empty());
    }

    #[test]
    fn only_opted_in_secrets_are_readable() {
        assert!(readable(&secret(Some("Opaque"), &[OPT_IN])));
        assert!(readable(&secret(None, &[OPT_IN])));
        assert!(!readable(&secret(Some("Opaque"), &[])));
        assert!(!readable(&secret(Some("Opaque"), &[(ACCESS_LABEL, "yes")]),));
        assert!(!readable(&secret(
            Some("Opaque"),
            &[(ACCESS_LABEL, "True")]
        ),));
        let mut no_labels = secret(Some("Opaque"), &[]);
        no_labels.metadata.labels = None;
        assert!(!readable(&no_labels));
    }

    #[test]
    fn flowline_own_secrets_are_never_readable_even_when_labelled() {
        for type_ in [
            "flowline.io/api-key",
            "flowline.io/webhook-secret",
            "helm.sh/release.v1",
            "kubernetes.io/service-account-token",
            "bootstrap.kubernetes.io/token",
        ] {
            assert!(!readable(&secret(Some(type_), &[OPT_IN])), "{type_}");
        }
        for label in [
            ("flowline.io/api-key", "true"),
            ("flowline.io/webhook", "wh"),
            ("flowline.io/hook", "wf-1"),
            ("app.kubernetes.io/part-of", "flowline"),
        ] {
            assert!(
                !readable(&secret(Some("Opaque"), &[OPT_IN, label])),
                "{label:?}"
            );
        }
        // Other Kubernetes types may opt in.
        let basic = secret(Some("kubernetes.io/basic-auth"), &[OPT_IN]);
        assert!(readable(&basic));
    }

    #[test]
    fn values_are_decoded_and_build_the_context() {
        let mut s = secret(Some("Opaque"), &[OPT_IN]);
        s.data = Some(BTreeMap::from([
            ("token".to_string(), ByteString(b"t0k3n".to_vec())),
            ("bin".to_string(), ByteString(vec![0xff, b'a'])),
        ]));
        let read = StepSecrets(BTreeMap::from([("crm".to_string(), values(s))]));
        assert_eq!(
            read.context(),
            json!({"crm": {"bin": "\u{fffd}a", "token": "t0k3n"}})
        );
        assert_eq!(
            read.values().collect::<Vec<_>>(),
            vec!["\u{fffd}a", "t0k3n"]
        );
    }

    #[test]
    fn placeholders_are_fresh_per_attempt_and_map_to_their_keys() {
        let read = StepSecrets(BTreeMap::from([(
            "crm".to_string(),
            BTreeMap::from([("token".to_string(), "t0k3n".to_string())]),
        )]));
        let first = read.placeholders();
        let second = read.placeholders();
        let text = first.context()["crm"]["token"].as_str().unwrap();
        assert_ne!(Some(text), second.context()["crm"]["token"].as_str());
        assert!(
            text.starts_with("flowline-secret-") && text.len() == 48,
            "{text}"
        );
        assert!(!text.contains("t0k3n"));
        let key = SecretKeyRef {
            name: "crm".into(),
            key: "token".into(),
        };
        assert_eq!(first.get(text), Some(&key));
        assert_eq!(first.get("t0k3n"), None);
        let header = format!("Bearer {text}");
        assert_eq!(
            first.found_in(&header).collect::<Vec<_>>(),
            vec![(text, &key)]
        );
        assert_eq!(second.found_in(&header).count(), 0);
    }

    #[test]
    fn substitution_replaces_placeholders_in_every_string() {
        let values = BTreeMap::from([
            ("flowline-secret-aa".to_string(), "tok".to_string()),
            ("flowline-secret-bb".to_string(), "pw".to_string()),
        ]);
        let mut with = json!({
            "url": "https://x/?a=flowline-secret-aa&b=flowline-secret-bb",
            "headers": {"A": "flowline-secret-aa"},
            "list": ["flowline-secret-bb", 3],
            "flowline-secret-aa": "keys are not substituted"
        });
        substitute(&mut with, &values);
        assert_eq!(
            with,
            json!({
                "url": "https://x/?a=tok&b=pw",
                "headers": {"A": "tok"},
                "list": ["pw", 3],
                "flowline-secret-aa": "keys are not substituted"
            })
        );
    }
}
