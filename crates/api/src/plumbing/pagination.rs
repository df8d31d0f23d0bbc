//! Keyset pagination: newest first by (time, id); the cursor is the
//! key of the last item served, so inserts while a client pages never shift,
//! duplicate or skip the objects that existed throughout.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Serialize;

use super::error::{ApiError, FieldError};

pub const DEFAULT_LIMIT: usize = 20;
pub const MAX_LIMIT: usize = 100;

/// Sort key of a listed object. Lists are ordered by this key, descending.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct SortKey {
    pub millis: i64,
    pub id: String,
}

impl SortKey {
    pub fn new(time: jiff::Timestamp, id: &str) -> Self {
        SortKey {
            millis: time.as_millisecond(),
            id: id.to_string(),
        }
    }

    fn encode(&self) -> String {
        URL_SAFE_NO_PAD.encode(format!("v1:{}:{}", self.millis, self.id))
    }

    fn decode(cursor: &str) -> Option<SortKey> {
        let raw = String::from_utf8(URL_SAFE_NO_PAD.decode(cursor).ok()?).ok()?;
        let rest = raw.strip_prefix("v1:")?;
        let (millis, id) = rest.split_once(':')?;
        if id.is_empty() {
            return None;
        }
        Some(SortKey {
            millis: millis.parse().ok()?,
            id: id.to_string(),
        })
    }
}

/// The list envelope.
#[derive(Debug, Serialize)]
pub struct Page<T> {
    pub data: Vec<T>,
    pub next_cursor: Option<String>,
}

/// `Page_<Item>`, its items a `$ref` to the item's own schema: a derived schema would
/// copy the item inline, leaving the item's schema unused and giving generated clients
/// an anonymous item type. (utoipa derives `PartialSchema` from `ComposeSchema`, the
/// trait it calls for a generic type; the generic schemas it passes are not needed.)
impl<T: utoipa::ToSchema> utoipa::__dev::ComposeSchema for Page<T> {
    fn compose(
        _: Vec<utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>>,
    ) -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, Ref, SchemaType, Type};
        ObjectBuilder::new()
            .description(Some("A page of a list, in the list's order."))
            .property(
                "data",
                ArrayBuilder::new().items(Ref::from_schema_name(T::name())),
            )
            .required("data")
            .property(
                "next_cursor",
                ObjectBuilder::new()
                    .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
                    .description(Some(
                        "Pass as `cursor` for the next page; `null` on the last page.",
                    )),
            )
            .required("next_cursor")
            .into()
    }
}

impl<T: utoipa::ToSchema> utoipa::ToSchema for Page<T> {
    /// utoipa appends the item's name: `Page_RunListItem`.
    fn name() -> std::borrow::Cow<'static, str> {
        "Page".into()
    }

    fn schemas(
        schemas: &mut Vec<(
            String,
            utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
        )>,
    ) {
        schemas.push((T::name().into_owned(), T::schema()));
        T::schemas(schemas);
    }
}

/// Parsed `limit`, `cursor` and one enum filter of a list request.
#[derive(Debug, Default)]
pub struct ListQuery {
    pub limit: usize,
    pub after: Option<SortKey>,
    pub filter: Option<String>,
}

/// Parses the query string. `filter` names the filter parameter (`state`,
/// `status`) and its allowed values; anything else is a 400.
pub fn parse_query(
    raw: Option<&str>,
    filter: Option<(&str, &[&str])>,
) -> Result<ListQuery, ApiError> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(raw.unwrap_or(""))
        .map_err(|_| ApiError::field("query", "the query string is malformed"))?;
    let mut query = ListQuery {
        limit: DEFAULT_LIMIT,
        ..Default::default()
    };
    let mut problems = Vec::new();
    for (key, value) in pairs {
        match key.as_str() {
            "limit" => match value.parse::<usize>() {
                Ok(n) if (1..=MAX_LIMIT).contains(&n) => query.limit = n,
                _ => problems.push(FieldError::new(
                    "limit",
                    format!("must be an integer from 1 to {MAX_LIMIT}"),
                )),
            },
            // An empty cursor is the first page, as if it were absent.
            "cursor" if value.is_empty() => {}
            "cursor" => query.after = Some(SortKey::decode(&value).ok_or(ApiError::InvalidCursor)?),
            name if filter.is_some_and(|(f, _)| f == name) => {
                let allowed = filter.map(|(_, a)| a).unwrap_or_default();
                if allowed.contains(&value.as_str()) {
                    query.filter = Some(value);
                } else {
                    problems.push(FieldError::new(
                        name,
                        format!("must be one of: {}", allowed.join(", ")),
                    ));
                }
            }
            _ => {} // unknown parameters are ignored, as most HTTP APIs do
        }
    }
    if problems.is_empty() {
        Ok(query)
    } else {
        Err(ApiError::fields(problems))
    }
}

/// One page of `items` (in any order) after the query's cursor.
pub fn paginate<T>(mut items: Vec<(SortKey, T)>, query: &ListQuery) -> Page<T> {
    items.sort_unstable_by(|a, b| b.0.cmp(&a.0));
    let start = match &query.after {
        Some(after) => items.partition_point(|(key, _)| key >= after),
        None => 0,
    };
    let mut rest = items.into_iter().skip(start);
    let data: Vec<(SortKey, T)> = rest.by_ref().take(query.limit).collect();
    let next_cursor = match (rest.next(), data.last()) {
        (Some(_), Some((last, _))) => Some(last.encode()),
        _ => None,
    };
    Page {
        data: data.into_iter().map(|(_, item)| item).collect(),
        next_cursor,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(ids: &[(i64, &str)]) -> Vec<(SortKey, String)> {
        ids.iter()
            .map(|(m, id)| {
                (
                    SortKey {
                        millis: *m,
                        id: id.to_string(),
                    },
                    id.to_string(),
                )
            })
            .collect()
    }

    fn query(limit: usize, after: Option<&str>) -> ListQuery {
        ListQuery {
            limit,
            after: after.map(|c| SortKey::decode(c).unwrap()),
            filter: None,
        }
    }

    #[test]
    fn pages_walk_newest_first_without_gaps_or_duplicates() {
        let items = keys(&[(1, "a"), (3, "c"), (2, "b"), (3, "d"), (5, "e")]);
        let first = paginate(items.clone(), &query(2, None));
        assert_eq!(first.data, ["e", "d"]);
        let second = paginate(items.clone(), &query(2, first.next_cursor.as_deref()));
        assert_eq!(second.data, ["c", "b"]);
        let third = paginate(items, &query(2, second.next_cursor.as_deref()));
        assert_eq!(third.data, ["a"]);
        assert_eq!(third.next_cursor, None);
    }

    #[test]
    fn inserts_between_pages_do_not_shift_the_walk() {
        let items = keys(&[(1, "a"), (2, "b"), (3, "c"), (4, "d")]);
        let first = paginate(items.clone(), &query(2, None));
        assert_eq!(first.data, ["d", "c"]);
        let mut grown = items;
        grown.extend(keys(&[(9, "new"), (3, "cc"), (2, "ba")]));
        let second = paginate(grown, &query(10, first.next_cursor.as_deref()));
        // Newcomers ahead of the cursor ("new", and "cc", which sorts before "c" at the
        // same millisecond) are not served; the rest continue in order.
        assert_eq!(second.data, ["ba", "b", "a"]);
    }

    #[test]
    fn last_full_page_has_no_cursor() {
        let page = paginate(keys(&[(1, "a"), (2, "b")]), &query(2, None));
        assert_eq!(page.next_cursor, None);
    }

    #[test]
    fn query_validation_follows_the_contract() {
        let states: &[&str] = &["draft", "active", "paused"];
        let q = parse_query(
            Some("limit=5&state=active&foo=bar"),
            Some(("state", states)),
        )
        .unwrap();
        assert_eq!((q.limit, q.filter.as_deref()), (5, Some("active")));
        assert_eq!(parse_query(None, None).unwrap().limit, DEFAULT_LIMIT);
        for bad in [
            "limit=0",
            "limit=101",
            "limit=abc",
            "limit=-1",
            "state=archived",
        ] {
            let err = parse_query(Some(bad), Some(("state", states))).unwrap_err();
            assert_eq!(err.code(), "validation_error", "{bad}");
        }
        for bad in ["cursor=%%%", "cursor=abc", "cursor=djE6eDp5"] {
            assert_eq!(
                parse_query(Some(bad), None).unwrap_err().code(),
                "invalid_cursor",
                "{bad}"
            );
        }
    }

    #[test]
    fn cursors_round_trip_ids_with_colons() {
        let key = SortKey {
            millis: 1_700_000_000_123,
            id: "a:b".into(),
        };
        assert_eq!(SortKey::decode(&key.encode()), Some(key));
    }
}
