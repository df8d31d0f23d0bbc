//! The page `GET /v1/workflows` answers, written from kept item bytes: the list is
//! sorted and cut on keys alone, and only the page's items are shaped, each rendered
//! once per cached copy (see [`crate::rendered`]).

use std::sync::Arc;

use bytes::Bytes;

use super::views::WorkflowListItem;
use crate::plumbing::pagination::{self, ListQuery, SortKey};
use crate::rendered::Rendered;
use flowline_core::crd::Workflow;
use flowline_core::crd::timestamps::created_at;

/// The list's filter parameter and the values it takes.
pub const STATE_FILTER: (&str, &[&str]) = ("state", &["draft", "active", "paused"]);

/// The bytes `serde_json::to_vec(&Page<WorkflowListItem>)` gives for the page of
/// `workflows` (the namespace's, in any order) that `query` asks for. `items` keeps
/// each item's bytes, keyed by `namespace` and the workflow's id.
pub fn render(
    items: &Rendered<Workflow>,
    namespace: &str,
    workflows: impl IntoIterator<Item = Arc<Workflow>>,
    query: &ListQuery,
) -> serde_json::Result<Bytes> {
    let keyed = workflows
        .into_iter()
        .filter(|wf| {
            query
                .filter
                .as_deref()
                .is_none_or(|s| wf.spec.state.as_str() == s)
        })
        .map(|wf| (SortKey::new(created_at(&wf.metadata), id(&wf)), wf))
        .collect();
    let page = pagination::paginate(keyed, query);
    let data = page
        .data
        .iter()
        .map(|wf| {
            items.get_or_render(namespace, id(wf), wf, |wf| {
                serde_json::to_vec(&WorkflowListItem::from(wf))
            })
        })
        .collect::<serde_json::Result<Vec<Bytes>>>()?;
    envelope(&data, page.next_cursor.as_deref())
}

/// A workflow's id, borrowed: the name every cached object has.
fn id(wf: &Workflow) -> &str {
    wf.metadata.name.as_deref().unwrap_or_default()
}

/// `{"data":[…],"next_cursor":…}` around rendered items: what serde writes for a
/// [`pagination::Page`] of them (its fields in order, no spaces).
fn envelope(data: &[Bytes], next_cursor: Option<&str>) -> serde_json::Result<Bytes> {
    const OPEN: &[u8] = b"{\"data\":[";
    const CURSOR: &[u8] = b"],\"next_cursor\":";
    let items_len: usize = data.iter().map(|item| item.len() + 1).sum();
    let cursor_len = next_cursor.map_or(4, |c| c.len() + 2);
    let mut json = Vec::with_capacity(OPEN.len() + items_len + CURSOR.len() + cursor_len + 1);
    json.extend_from_slice(OPEN);
    for (i, item) in data.iter().enumerate() {
        if i > 0 {
            json.push(b',');
        }
        json.extend_from_slice(item);
    }
    json.extend_from_slice(CURSOR);
    serde_json::to_writer(&mut json, &next_cursor)?;
    json.push(b'}');
    Ok(json.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::ResourceExt;
    use serde_json::{Value, json};

    use crate::testing::*;
    use flowline_core::crd::timestamps::{CREATED_AT_ANNOTATION, UPDATED_AT_ANNOTATION};

    /// A workflow of [`NS`] created at `created` (the API's annotation, to the
    /// millisecond).
    fn created(id: &str, at: &str, spec: Value) -> Workflow {
        let mut wf = workflow(id, spec);
        wf.annotations_mut()
            .insert(CREATED_AT_ANNOTATION.into(), at.into());
        wf
    }

    /// Workflows of every state, two created in the same millisecond (their ids
    /// order them), one updated since, and one of another account.
    fn fixtures() -> Vec<Workflow> {
        let mut updated = created(
            "wf-updated",
            "2026-01-02T00:00:00.250Z",
            json!({"state": "active", "name": "Has \"quotes\" and ünïcode"}),
        );
        updated.annotations_mut().insert(
            UPDATED_AT_ANNOTATION.into(),
            "2026-01-05T10:00:00.5Z".into(),
        );
        vec![
            created("wf-a", "2026-01-01T00:00:00.001Z", json!({})),
            created("wf-b", "2026-01-03T00:00:00Z", json!({"state": "active"})),
            created("wf-c", "2026-01-03T00:00:00Z", json!({"state": "paused"})),
            created("wf-d", "2026-01-03T00:00:00Z", json!({"state": "active"})),
            updated,
            created("wf-e", "2026-01-04T00:00:00Z", json!({})),
            // Only the creation timestamp, to the second.
            workflow("wf-f", json!({"state": "active"})),
            workflow_in(OTHER_NS, "wf-theirs", json!({"state": "active"})),
        ]
    }

    /// The page as serde writes it: every item shaped, the list paginated, the
    /// page serialized.
    fn serialized(workflows: &[Workflow], query: &str) -> Vec<u8> {
        let q = pagination::parse_query(Some(query), Some(STATE_FILTER)).unwrap();
        let items = workflows
            .iter()
            .filter(|wf| wf.namespace().as_deref() == Some(NS))
            .filter(|wf| {
                q.filter
                    .as_deref()
                    .is_none_or(|s| wf.spec.state.as_str() == s)
            })
            .map(|wf| {
                (
                    SortKey::new(created_at(&wf.metadata), &wf.name_any()),
                    WorkflowListItem::from(wf),
                )
            })
            .collect();
        serde_json::to_vec(&pagination::paginate(items, &q)).unwrap()
    }

    #[tokio::test]
    async fn pages_are_the_bytes_serde_would_write() {
        let workflows = fixtures();
        let api = workflows
            .iter()
            .cloned()
            .fold(World::default(), World::workflow)
            .start();
        for first in [
            "",
            "limit=100",
            "limit=2",
            "limit=1&state=active",
            "state=draft&limit=1",
            "state=paused",
            "cursor=&limit=3&foo=bar",
        ] {
            let mut query = first.to_string();
            let mut pages = 0;
            loop {
                let expected = serialized(&workflows, &query);
                // Rendered, then served from the kept items.
                for _ in 0..2 {
                    let answer = api
                        .send(
                            call("GET", &format!("/v1/workflows?{query}"))
                                .key(READ)
                                .build(),
                        )
                        .await;
                    assert_eq!(answer.status, 200, "{query}");
                    assert_eq!(answer.headers["content-type"], "application/json");
                    assert_eq!(
                        String::from_utf8_lossy(&answer.raw),
                        String::from_utf8_lossy(&expected),
                        "{query}"
                    );
                }
                pages += 1;
                let body: Value = serde_json::from_slice(&expected).unwrap();
                match body["next_cursor"].as_str() {
                    Some(cursor) => query = format!("{first}&cursor={cursor}"),
                    None => break,
                }
            }
            let walked = match first {
                "limit=2" => 4,
                "limit=1&state=active" => 4,
                "state=draft&limit=1" => 2,
                "cursor=&limit=3&foo=bar" => 3,
                _ => 1,
            };
            assert_eq!(pages, walked, "{first}");
        }
        api.assert_untouched();
    }

    #[test]
    fn an_item_is_rendered_again_once_its_cached_copy_changes() {
        let items = Rendered::default();
        let all = ListQuery {
            limit: pagination::MAX_LIMIT,
            ..ListQuery::default()
        };
        let page = |workflows: &[Arc<Workflow>]| {
            render(&items, NS, workflows.iter().cloned(), &all).unwrap()
        };
        let owned = |workflows: &[Arc<Workflow>]| -> Vec<Workflow> {
            workflows.iter().map(|wf| Workflow::clone(wf)).collect()
        };
        assert_eq!(page(&[]), serialized(&[], ""));

        let other = Arc::new(created("wf-other", "2026-01-01T00:00:00Z", json!({})));
        let v1 = Arc::new(created(
            "wf-a",
            "2026-01-02T00:00:00Z",
            json!({"name": "One"}),
        ));
        let listed = [v1.clone(), other.clone()];
        assert_eq!(page(&listed), serialized(&owned(&listed), ""));
        // Kept: served again without rendering.
        let kept = items.get_or_render(NS, "wf-a", &v1, |_| Err(()));
        assert_eq!(
            kept,
            Ok(serde_json::to_vec(&WorkflowListItem::from(&*v1))
                .unwrap()
                .into())
        );

        // The cache's copy changed (a new Arc): the item shows the change.
        let v2 = Arc::new(created(
            "wf-a",
            "2026-01-02T00:00:00Z",
            json!({"name": "Two", "state": "paused"}),
        ));
        let listed = [v2.clone(), other];
        let json = page(&listed);
        assert_eq!(json, serialized(&owned(&listed), ""));
        assert!(String::from_utf8_lossy(&json).contains(r#""name":"Two","state":"paused""#));
        assert!(items.get_or_render(NS, "wf-a", &v2, |_| Err(())).is_ok());
    }
}
