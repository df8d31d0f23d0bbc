// kube-derive's printcolumn(...) lists repeat `type_ = ...`, which clippy mistakes for
// duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// An API key of the account (namespace) it lives in, kept only as the SHA-256 of its
/// value: a kind of its own rather than a Secret, so that the API reads keys without
/// being able to read the account's Secrets, and the key's value is nowhere in the
/// cluster.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "flowline.io",
    version = "v1",
    kind = "ApiKey",
    plural = "apikeys",
    shortname = "flkey",
    category = "flowline",
    doc = "An API key of the account: its name, scopes and the SHA-256 of its value (the value itself is shown once, when the key is made, and stored nowhere).",
    namespaced,
    validation = Rule::new("self.spec == oldSelf.spec").message("an API key cannot be changed: make a new one and revoke this one"),
    printcolumn(name = "Key-Name", type_ = "string", json_path = ".spec.name"),
    printcolumn(name = "Scopes", type_ = "string", json_path = ".spec.scopes"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ApiKeySpec {
    /// What the key is for, for people.
    #[schemars(length(min = 1, max = 200))]
    pub name: String,
    /// What the key may do: `read`, `write` and `execute` (each including `read`), or
    /// `admin` (everything).
    #[schemars(length(min = 1, max = 4))]
    pub scopes: Vec<Scope>,
    /// Lowercase hex SHA-256 of the key's value.
    #[schemars(regex(pattern = r"^[0-9a-f]{64}$"))]
    pub sha256: String,
}

/// Permission scopes. `write` and `execute` include `read`; `admin` includes all.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
    utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    Read,
    Write,
    Execute,
    Admin,
}

impl Scope {
    pub const ALL: [Scope; 4] = [Scope::Read, Scope::Write, Scope::Execute, Scope::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Write => "write",
            Scope::Execute => "execute",
            Scope::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|scope| scope.as_str() == s)
    }

    /// Whether holding `self` grants `needed`.
    pub fn grants(self, needed: Scope) -> bool {
        self == needed
            || self == Scope::Admin
            || (needed == Scope::Read && matches!(self, Scope::Write | Scope::Execute))
    }
}
