//! JSON answers of single reads (and items of lists), kept while the watch cache holds
//! the very copy they were rendered from: a repeated `GET /v1/workflows/{id}` sends
//! the same bytes without shaping and serializing the view again (a tenth of a single
//! GET's CPU, measured with perf), and `GET /v1/workflows` joins its page's kept items.
//!
//! Validity is identity, not time: a reflector replaces an object's `Arc` on every
//! change, so an answer rendered from the `Arc` the cache holds now is current. The
//! entry keeps a `Weak` of that `Arc`, which keeps its allocation (not the object)
//! alive, so no later object can take its address and be mistaken for it.
//!
//! Bounded: answers over [`MAX_ANSWER_BYTES`] are not kept, and when the kept bytes
//! would pass [`MAX_TOTAL_BYTES`] the whole table starts over (a simple bound; the
//! next reads render again).

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock, Weak};

use bytes::Bytes;

/// Largest answer kept: larger ones are rare and rendered each time.
pub const MAX_ANSWER_BYTES: usize = 64 << 10;
/// Most bytes kept in all.
pub const MAX_TOTAL_BYTES: usize = 8 << 20;

struct Entry<K> {
    source: Weak<K>,
    json: Bytes,
}

/// Rendered answers by object (namespace, name).
pub struct Rendered<K> {
    entries: RwLock<Table<K>>,
}

struct Table<K> {
    /// By namespace, then name: looked up with borrowed strings.
    by_key: HashMap<String, HashMap<String, Entry<K>>>,
    bytes: usize,
}

impl<K> Default for Rendered<K> {
    fn default() -> Self {
        Rendered {
            entries: RwLock::new(Table {
                by_key: HashMap::new(),
                bytes: 0,
            }),
        }
    }
}

impl<K> Rendered<K> {
    /// The answer for `object` (the cache's current copy of `namespace`/`name`):
    /// the kept one if it was rendered from this very copy, else `render`'s.
    pub fn get_or_render<E>(
        &self,
        namespace: &str,
        name: &str,
        object: &Arc<K>,
        render: impl FnOnce(&K) -> Result<Vec<u8>, E>,
    ) -> Result<Bytes, E> {
        {
            let table = self.entries.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(entry) = table.by_key.get(namespace).and_then(|n| n.get(name))
                && std::ptr::eq(entry.source.as_ptr(), Arc::as_ptr(object))
            {
                return Ok(entry.json.clone());
            }
        }
        let json = Bytes::from(render(object)?);
        if json.len() <= MAX_ANSWER_BYTES {
            self.keep(namespace, name, object, json.clone());
        }
        Ok(json)
    }

    fn keep(&self, namespace: &str, name: &str, object: &Arc<K>, json: Bytes) {
        let mut table = self.entries.write().unwrap_or_else(PoisonError::into_inner);
        if table.bytes + json.len() > MAX_TOTAL_BYTES {
            table.by_key.clear();
            table.bytes = 0;
        }
        table.bytes += json.len();
        let entry = Entry {
            source: Arc::downgrade(object),
            json,
        };
        let replaced = table
            .by_key
            .entry(namespace.to_owned())
            .or_default()
            .insert(name.to_owned(), entry);
        if let Some(old) = replaced {
            table.bytes -= old.json.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn render(calls: &Cell<u32>) -> impl FnOnce(&String) -> Result<Vec<u8>, ()> + '_ {
        move |s: &String| {
            calls.set(calls.get() + 1);
            Ok(format!("\"{s}\"").into_bytes())
        }
    }

    #[test]
    fn the_same_copy_is_rendered_once_a_new_copy_again() {
        let kept = Rendered::default();
        let calls = Cell::new(0);
        let v1 = Arc::new("one".to_string());
        assert_eq!(
            kept.get_or_render("n", "a", &v1, render(&calls)),
            Ok(Bytes::from("\"one\""))
        );
        assert_eq!(
            kept.get_or_render("n", "a", &v1, render(&calls)),
            Ok(Bytes::from("\"one\""))
        );
        assert_eq!(calls.get(), 1);
        // The cache's copy changed (a new Arc, even with equal contents): rendered anew.
        let v2 = Arc::new("two".to_string());
        assert_eq!(
            kept.get_or_render("n", "a", &v2, render(&calls)),
            Ok(Bytes::from("\"two\""))
        );
        assert_eq!(calls.get(), 2);
        // Same name in another namespace: its own entry.
        assert_eq!(
            kept.get_or_render("m", "a", &v1, render(&calls)),
            Ok(Bytes::from("\"one\""))
        );
        assert_eq!(calls.get(), 3);
    }

    #[test]
    fn a_dropped_copy_is_never_mistaken_for_a_new_one() {
        let kept = Rendered::default();
        let calls = Cell::new(0);
        let old = Arc::new("old".to_string());
        kept.get_or_render("n", "a", &old, render(&calls)).unwrap();
        drop(old);
        // The Weak keeps the old allocation: the new copy has another address.
        let new = Arc::new("new".to_string());
        assert_eq!(
            kept.get_or_render("n", "a", &new, render(&calls)),
            Ok(Bytes::from("\"new\""))
        );
    }

    #[test]
    fn kept_bytes_are_bounded() {
        let kept = Rendered::default();
        let big = Arc::new("x".repeat(MAX_ANSWER_BYTES - 2));
        let calls = Cell::new(0);
        for i in 0..(MAX_TOTAL_BYTES / MAX_ANSWER_BYTES + 10) {
            kept.get_or_render("n", &format!("o{i}"), &big, render(&calls))
                .unwrap();
            assert!(kept.entries.read().unwrap().bytes <= MAX_TOTAL_BYTES);
        }
        let huge = Arc::new("x".repeat(MAX_ANSWER_BYTES));
        kept.get_or_render("n", "huge", &huge, render(&calls))
            .unwrap();
        kept.get_or_render("n", "huge", &huge, render(&calls))
            .unwrap();
        let before = calls.get();
        kept.get_or_render("n", "huge", &huge, render(&calls))
            .unwrap();
        assert_eq!(
            calls.get(),
            before + 1,
            "too large to keep: rendered each time"
        );
    }
}
