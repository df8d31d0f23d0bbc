//! The clock and the one timestamp format Flowline writes.
//!
//! Every layer stamps times (the engine on step records and events, delivery on
//! attempts and rotated secrets, controllers on objects they create, the API on
//! responses), so this sits at the bottom, depending on nothing in the crate:
//! no lower layer has to reach up into `api` for it.

use jiff::Timestamp;

/// Timestamps as the contract wants them: RFC 3339, UTC, `Z`, milliseconds.
pub fn format_ts(ts: Timestamp) -> String {
    ts.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

/// The current time truncated to milliseconds, the precision everything
/// Flowline stores and shows has (so a stored time reads back equal).
pub fn now_ms() -> Timestamp {
    Timestamp::from_millisecond(Timestamp::now().as_millisecond())
        .unwrap_or_else(|_| Timestamp::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_have_milliseconds_and_z() {
        let ts: Timestamp = "2026-01-02T03:04:05.123456789Z".parse().unwrap();
        assert_eq!(format_ts(ts), "2026-01-02T03:04:05.123Z");
        let whole: Timestamp = "2026-01-02T03:04:05Z".parse().unwrap();
        assert_eq!(format_ts(whole), "2026-01-02T03:04:05.000Z");
    }

    #[test]
    fn now_has_no_sub_millisecond_part() {
        assert_eq!(now_ms().subsec_nanosecond() % 1_000_000, 0);
    }
}
