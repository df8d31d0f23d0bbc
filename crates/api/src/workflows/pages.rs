//! Whole pages of `GET /v1/workflows`, kept while the workflow cache does not change:
//! a repeated list sends the same bytes without looking up, sorting and joining the
//! namespace's workflows again (per request, those look-ups were most of a list's CPU:
//! a store look-up and a kept item's look-up for each of 100 workflows, measured with
//! perf).
//!
//! Validity is the cache's version ([`crate::cache::ScopedStore::version`]), which
//! changes before and after the cache applies any change, so a page is kept only when
//! the version was the same, and settled, before and after it was built, and served
//! only while the version is still that one. A write the API waits to see in its cache
//! (read-your-writes) is therefore in every page served after it.
//!
//! Keyed by account (namespace) and query: one account never gets another's page.
//! Bounded like [`crate::rendered`]: pages over [`MAX_PAGE_BYTES`] are not kept, and
//! the table starts over when it would pass [`MAX_TOTAL_BYTES`] or the version moves.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use bytes::Bytes;

use crate::plumbing::pagination::ListQuery;

/// Largest page kept.
pub const MAX_PAGE_BYTES: usize = 1 << 20;
/// Most bytes kept in all.
pub const MAX_TOTAL_BYTES: usize = 16 << 20;

/// Kept pages (see the module docs).
#[derive(Default)]
pub struct Pages {
    kept: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    /// The cache version every kept page was built at.
    version: u64,
    /// By namespace, then query.
    pages: HashMap<String, HashMap<QueryKey, Bytes>>,
    bytes: usize,
}

/// What of a query decides its page.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct QueryKey {
    limit: usize,
    after: Option<(i64, String)>,
    filter: Option<String>,
}

impl QueryKey {
    pub fn of(query: &ListQuery) -> Self {
        QueryKey {
            limit: query.limit,
            after: (query.after.as_ref()).map(|key| (key.millis, key.id.clone())),
            filter: query.filter.clone(),
        }
    }
}

impl Pages {
    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The page kept for `namespace` and `query` at cache version `version`.
    pub fn get(&self, version: u64, namespace: &str, query: &QueryKey) -> Option<Bytes> {
        let kept = self.lock();
        if kept.version != version {
            return None;
        }
        kept.pages.get(namespace)?.get(query).cloned()
    }

    /// Keeps `page`, built from the cache at `version` (settled, and the same after it
    /// was built).
    pub fn keep(&self, version: u64, namespace: &str, query: QueryKey, page: Bytes) {
        if page.len() > MAX_PAGE_BYTES {
            return;
        }
        let mut kept = self.lock();
        // Built at a version already passed (a slow request): of no use.
        if version < kept.version {
            return;
        }
        if kept.version != version || kept.bytes + page.len() > MAX_TOTAL_BYTES {
            *kept = Kept {
                version,
                ..Kept::default()
            };
        }
        kept.bytes += page.len();
        let replaced = (kept.pages.entry(namespace.to_string()).or_default()).insert(query, page);
        if let Some(old) = replaced {
            kept.bytes -= old.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(limit: usize, filter: Option<&str>) -> QueryKey {
        QueryKey::of(&ListQuery {
            limit,
            after: None,
            filter: filter.map(str::to_string),
        })
    }

    #[test]
    fn a_page_is_served_only_at_its_version_for_its_account_and_query() {
        let pages = Pages::default();
        let page = Bytes::from_static(b"{\"data\":[],\"next_cursor\":null}");
        pages.keep(4, "a", query(100, None), page.clone());
        assert_eq!(pages.get(4, "a", &query(100, None)), Some(page.clone()));
        assert_eq!(
            pages.get(4, "b", &query(100, None)),
            None,
            "another account"
        );
        assert_eq!(pages.get(4, "a", &query(10, None)), None, "another limit");
        assert_eq!(
            pages.get(4, "a", &query(100, Some("active"))),
            None,
            "another filter"
        );
        assert_eq!(
            pages.get(6, "a", &query(100, None)),
            None,
            "the cache changed"
        );

        pages.keep(6, "b", query(100, None), page.clone());
        assert_eq!(
            pages.get(4, "a", &query(100, None)),
            None,
            "a newer version starts over"
        );
        assert_eq!(pages.get(6, "b", &query(100, None)), Some(page.clone()));

        pages.keep(4, "a", query(100, None), page.clone());
        assert_eq!(
            pages.get(6, "b", &query(100, None)),
            Some(page),
            "a page built at an older version is dropped, not kept over newer ones"
        );
    }

    #[test]
    fn pages_are_bounded() {
        let pages = Pages::default();
        pages.keep(
            2,
            "a",
            query(1, None),
            Bytes::from(vec![b' '; MAX_PAGE_BYTES + 1]),
        );
        assert_eq!(
            pages.get(2, "a", &query(1, None)),
            None,
            "too large to keep"
        );
        let big = Bytes::from(vec![b' '; MAX_PAGE_BYTES]);
        for limit in 0..(MAX_TOTAL_BYTES / MAX_PAGE_BYTES + 1) {
            pages.keep(2, "a", query(limit, None), big.clone());
        }
        let kept = pages.lock();
        assert!(kept.bytes <= MAX_TOTAL_BYTES, "{} bytes kept", kept.bytes);
        assert_eq!(
            kept.bytes,
            kept.pages
                .values()
                .flat_map(|p| p.values())
                .map(Bytes::len)
                .sum::<usize>()
        );
    }
}
