//! A timestamp as every view writes it.

use jiff::Timestamp;
use serde::{Serialize, Serializer};

use flowline_core::clock::format_ts;

/// A timestamp as the contract writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ApiTime(pub Timestamp);

impl Serialize for ApiTime {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_ts(self.0))
    }
}
