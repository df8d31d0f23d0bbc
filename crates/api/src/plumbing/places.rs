//! A bound per account on work that outlives a quick request: each account holds at
//! most `limit` places at once, so one account cannot take what others need (logs
//! followed hold connections; bulk actions make up to 1,000 writes each).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The places each account holds now, at most `limit` each.
#[derive(Debug)]
pub struct Places {
    limit: usize,
    held: Mutex<HashMap<String, usize>>,
}

/// One held place; given back when dropped.
#[derive(Debug)]
pub struct Place {
    places: Arc<Places>,
    account: String,
}

impl Places {
    pub fn new(limit: usize) -> Arc<Places> {
        Arc::new(Places {
            limit,
            held: Mutex::default(),
        })
    }

    /// A place for `account`, or `None` while it holds `limit`.
    pub fn enter(self: &Arc<Self>, account: &str) -> Option<Place> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let count = held.entry(account.to_owned()).or_default();
        if *count >= self.limit {
            return None;
        }
        *count += 1;
        Some(Place {
            places: self.clone(),
            account: account.to_owned(),
        })
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut held = self.places.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = held.get_mut(&self.account) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.account);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_account_holds_a_bounded_number_of_places_and_gets_them_back() {
        let places = Places::new(3);
        let held: Vec<_> = (0..3)
            .map(|_| places.enter("a").expect("a place"))
            .collect();
        assert!(places.enter("a").is_none(), "the bound holds");
        assert!(
            places.enter("b").is_some(),
            "other accounts are not held up"
        );
        drop(held);
        assert!(places.enter("a").is_some(), "places come back");
        assert!(
            places.held.lock().unwrap().get("b").is_none(),
            "no count is left behind"
        );
    }
}
