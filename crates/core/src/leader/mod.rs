//! Leader election's decisions and timing, apart from the Lease reads and writes.

pub mod decide;
pub mod timing;
pub mod watchdog;

/// Annotation of a shard Lease: the shard count of the replica that wrote it.
pub const SHARDS_ANNOTATION: &str = "flowline.io/shards";
