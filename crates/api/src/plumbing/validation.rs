//! What every request body shares: the [`Validate`] trait its type implements (the rules
//! a schema cannot say), the collector of field problems, and the strict shape reader
//! that turns well-formed JSON into the body's type.
//!
//! A body is read in three passes, each refusing with the contract's codes (see
//! [`super::json::Valid`]): well-formed JSON (`invalid_json`), then its shape — an
//! unknown field, a wrong type, an unknown enum value, an array or a scalar where an
//! object belongs — reported for the first such field with its path
//! (`steps[1].action`), then the rules, every problem reported with its path.

use std::fmt;

use serde::de::value::BorrowedStrDeserializer;
use serde::de::{self, DeserializeOwned, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::error::{ApiError, FieldError};
use crate::state::ApiConfig;

/// The most characters of a display name (a workflow's, a step's, an API key's).
pub const MAX_NAME: usize = 200;

/// A request body's rules beyond its shape. `validate` sees the body as the client sent
/// it, after serde has read it, and reports every problem at once.
pub trait Validate: DeserializeOwned {
    fn validate(&self, config: &ApiConfig) -> Result<(), Problems>;

    /// The body an empty request stands for; `None` (the default) when a body is
    /// required. An optional body is an `Option<T>`.
    fn absent() -> Option<Self> {
        None
    }
}

/// An optional body: no body at all, or a JSON `null` (generated clients send it for
/// "no body"), is `None`.
impl<T: Validate> Validate for Option<T> {
    fn validate(&self, config: &ApiConfig) -> Result<(), Problems> {
        self.as_ref().map_or(Ok(()), |body| body.validate(config))
    }

    fn absent() -> Option<Self> {
        Some(None)
    }
}

/// Reads well-formed JSON as `T`, then checks `T`'s rules: the shape and rule passes of
/// [`super::json::Valid`].
pub fn accept<T: Validate>(body: &Value, config: &ApiConfig) -> Result<T, ApiError> {
    let body: T = shaped(body)?;
    body.validate(config)?;
    Ok(body)
}

/// Field problems found while a body is checked.
#[derive(Debug, Default)]
pub struct Problems(Vec<FieldError>);

impl Problems {
    pub fn add(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError::new(field, message));
    }

    /// Whether a problem of `field` was found already.
    pub fn has(&self, field: &str) -> bool {
        self.0.iter().any(|e| e.field == field)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `Ok` when nothing was found.
    pub fn finish(self) -> Result<(), Problems> {
        if self.0.is_empty() { Ok(()) } else { Err(self) }
    }
}

impl From<Problems> for ApiError {
    fn from(p: Problems) -> Self {
        ApiError::fields(p.0)
    }
}

/// Checks a text's length (in characters) and, when `required`, that it is not blank.
pub fn text(s: &str, field: &str, max: usize, required: bool, p: &mut Problems) {
    if required && s.trim().is_empty() {
        p.add(field, "must not be empty");
    } else if s.chars().count() > max {
        p.add(field, format!("must be at most {max} characters"));
    }
}

/// Whether `s` is a DNS label: what a step id must be.
pub fn is_dns_label(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

/// A field that may be absent but not `null` (`#[serde(default)]` gives `None` when
/// absent; `null` is refused by `T`).
pub fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// A field where `null` means something (`Some(None)`): absent is `None`.
pub fn nullable<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// Reads `body` as `T`. The first shape problem is a `validation_error` on its path.
/// serde quotes what it got (an unknown field's name, an unknown value), so path and
/// message are capped like every error string sent.
pub fn shaped<T: DeserializeOwned>(body: &Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(Strict(body)).map_err(|err| {
        let path = err.path().to_string();
        let message = flowline_core::limits::cap_error(err.into_inner().to_string());
        ApiError::field(
            flowline_core::limits::cap_error(field_of(&path, &message)),
            message,
        )
    })
}

/// The path a shape error is about. serde_path_to_error's path ends at the offending
/// field, but for a missing one it is the object's, and serde names the field only in
/// its message.
fn field_of(path: &str, message: &str) -> String {
    let missing = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split('`').next());
    match (path, missing) {
        (".", Some(name)) => name.to_string(),
        (".", None) => "body".to_string(),
        (path, Some(name)) => format!("{path}.{name}"),
        (path, None) => path.to_string(),
    }
}

/// serde_json's reader of a [`Value`], but a struct is read from an object only. serde's
/// derived structs also accept an array of their fields in order (`["Sync", null]` for
/// `{"name": "Sync", "description": null}`), which the contract does not allow: the
/// document says object, and an array must not create an API key. Everything else
/// (messages included) is serde_json's own.
#[derive(Clone, Copy)]
struct Strict<'de>(&'de Value);

/// An object's entries, each value read strictly.
struct StrictMap<'de> {
    entries: serde_json::map::Iter<'de>,
    value: Option<&'de Value>,
}

/// An array's elements, each read strictly.
struct StrictSeq<'de>(std::slice::Iter<'de, Value>);

impl<'de> Strict<'de> {
    fn visit_object<V: Visitor<'de>>(
        map: &'de serde_json::Map<String, Value>,
        visitor: V,
    ) -> Result<V::Value, serde_json::Error> {
        visitor.visit_map(StrictMap {
            entries: map.iter(),
            value: None,
        })
    }

    fn visit_array<V: Visitor<'de>>(
        items: &'de [Value],
        visitor: V,
    ) -> Result<V::Value, serde_json::Error> {
        let mut seq = StrictSeq(items.iter());
        let value = visitor.visit_seq(&mut seq)?;
        match seq.0.len() {
            0 => Ok(value),
            _ => Err(de::Error::invalid_length(
                items.len(),
                &"fewer elements in array",
            )),
        }
    }
}

impl<'de> Deserializer<'de> for Strict<'de> {
    type Error = serde_json::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Array(items) => Self::visit_array(items, visitor),
            Value::Object(map) => Self::visit_object(map, visitor),
            scalar => scalar.deserialize_any(visitor),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Array(items) => Self::visit_array(items, visitor),
            other => other.deserialize_seq(visitor),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Object(map) => Self::visit_object(map, visitor),
            other => other.deserialize_map(visitor),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Object(map) => Self::visit_object(map, visitor),
            other => Err(de::Error::invalid_type(unexpected(other), &visitor)),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        // The enums of request bodies have unit variants only: nothing nested to read.
        self.0.deserialize_enum(name, variants, visitor)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct identifier
    }
}

/// What serde calls the JSON value `v`, in an error message.
fn unexpected(v: &Value) -> de::Unexpected<'_> {
    match v {
        Value::Null => de::Unexpected::Unit,
        Value::Bool(b) => de::Unexpected::Bool(*b),
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => de::Unexpected::Unsigned(u),
            (_, Some(i), _) => de::Unexpected::Signed(i),
            (_, _, Some(f)) => de::Unexpected::Float(f),
            _ => de::Unexpected::Other("number"),
        },
        Value::String(s) => de::Unexpected::Str(s),
        Value::Array(_) => de::Unexpected::Seq,
        Value::Object(_) => de::Unexpected::Map,
    }
}

impl<'de> MapAccess<'de> for StrictMap<'de> {
    type Error = serde_json::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Self::Error> {
        match self.entries.next() {
            Some((key, value)) => {
                self.value = Some(value);
                seed.deserialize(BorrowedStrDeserializer::new(key))
                    .map(Some)
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<S::Value, Self::Error> {
        match self.value.take() {
            Some(value) => seed.deserialize(Strict(value)),
            None => Err(de::Error::custom("value is missing")),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

impl<'de> SeqAccess<'de> for StrictSeq<'de> {
    type Error = serde_json::Error;

    fn next_element_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, Self::Error> {
        self.0
            .next()
            .map(|value| seed.deserialize(Strict(value)))
            .transpose()
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.0.len())
    }
}

impl fmt::Debug for Strict<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Map, json};

    #[derive(Deserialize, Debug, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Outer {
        name: String,
        inner: Option<Inner>,
        #[serde(default)]
        list: Vec<Inner>,
        with: Option<Map<String, Value>>,
    }

    #[derive(Deserialize, Debug, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        n: u32,
    }

    fn read(v: Value) -> Result<Outer, (String, String)> {
        shaped::<Outer>(&v).map_err(|e| match e {
            ApiError::Validation { details, .. } => {
                (details[0].field.clone(), details[0].message.clone())
            }
            other => panic!("{other:?}"),
        })
    }

    #[test]
    fn objects_read_as_serde_json_reads_them() {
        let v = json!({"name": "a", "inner": {"n": 1}, "list": [{"n": 2}],
                       "with": {"x": [1, {"y": null}], "z": "s"}});
        let read = read(v.clone()).unwrap();
        assert_eq!(read, serde_json::from_value::<Outer>(v.clone()).unwrap());
        assert_eq!(Value::Object(read.with.unwrap()), v["with"]);
    }

    #[test]
    fn a_struct_is_read_from_an_object_only() {
        for (body, field, message) in [
            (
                json!(["a", null]),
                "body",
                "invalid type: sequence, expected struct Outer",
            ),
            (
                json!("a"),
                "body",
                "invalid type: string \"a\", expected struct Outer",
            ),
            (
                json!(7),
                "body",
                "invalid type: integer `7`, expected struct Outer",
            ),
            (
                json!(null),
                "body",
                "invalid type: null, expected struct Outer",
            ),
            (
                json!({"name": "a", "inner": [1]}),
                "inner",
                "invalid type: sequence, expected struct Inner",
            ),
            (
                json!({"name": "a", "list": [{"n": 1}, [2]]}),
                "list[1]",
                "invalid type: sequence, expected struct Inner",
            ),
            (
                json!({"name": "a", "with": [1]}),
                "with",
                "invalid type: sequence, expected a map",
            ),
        ] {
            assert_eq!(
                read(body.clone()),
                Err((field.to_string(), message.to_string())),
                "{body}"
            );
        }
    }

    #[test]
    fn shape_problems_keep_serde_json_s_words_and_paths() {
        for body in [
            json!({"name": 3}),
            json!({"name": "a", "inner": {"n": -1}}),
            json!({"name": "a", "list": [{"m": 1}]}),
            json!({"inner": {"n": 1}}),
            json!({"name": "a", "nmae": 1}),
        ] {
            let ours = read(body.clone()).unwrap_err().1;
            let theirs = serde_json::from_value::<Outer>(body.clone())
                .unwrap_err()
                .to_string();
            assert_eq!(ours, theirs, "{body}");
        }
        assert_eq!(
            read(json!({"name": "a", "list": [{"n": 1}, {"m": 1}]}))
                .unwrap_err()
                .0,
            "list[1].m"
        );
        assert_eq!(read(json!({})).unwrap_err().0, "name");
    }
}
