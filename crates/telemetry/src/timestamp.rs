//! The timestamp of a log line as tracing-subscriber writes it (RFC 3339, UTC,
//! microseconds: `2026-11-25T20:16:45.949903Z`), for lines Flowline formats itself
//! (`access_line`). The date and time of day change once a second: they are
//! formatted once a second per thread and only the microseconds on every line.

use std::cell::RefCell;
use std::time::{SystemTime, UNIX_EPOCH};

/// `YYYY-MM-DDTHH:MM:SS`.
const SECOND_LEN: usize = 19;

thread_local! {
    /// The last second this thread formatted, and its text.
    static LAST: RefCell<(u64, [u8; SECOND_LEN])> = const { RefCell::new((u64::MAX, [0; SECOND_LEN])) };
}

/// Appends the timestamp of `at` to `out`.
pub fn write(out: &mut Vec<u8>, at: SystemTime) {
    // A clock before 1970 is written as 1970 (tracing-subscriber does not do better).
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    let second = since.as_secs();
    LAST.with(|last| {
        let mut last = last.borrow_mut();
        if last.0 != second {
            last.1 = format_second(second);
            last.0 = second;
        }
        out.extend_from_slice(&last.1);
    });
    out.push(b'.');
    push_padded(out, since.subsec_micros(), 6);
    out.push(b'Z');
}

fn format_second(second: u64) -> [u8; SECOND_LEN] {
    let text = i64::try_from(second)
        .ok()
        .and_then(|s| jiff::Timestamp::from_second(s).ok())
        .unwrap_or(jiff::Timestamp::MAX)
        .strftime("%Y-%m-%dT%H:%M:%S")
        .to_string();
    let mut out = [b'0'; SECOND_LEN];
    // Years past 9999 do not fit; they do not happen.
    let n = text.len().min(SECOND_LEN);
    out[..n].copy_from_slice(&text.as_bytes()[..n]);
    out
}

/// Appends `n` in decimal, left-padded with zeros to `width` digits.
pub fn push_padded(out: &mut Vec<u8>, n: u32, width: usize) {
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(n).as_bytes();
    out.resize(out.len() + width.saturating_sub(digits.len()), b'0');
    out.extend_from_slice(digits);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn text(at: SystemTime) -> String {
        let mut out = Vec::new();
        write(&mut out, at);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn rfc3339_with_microseconds_as_tracing_subscriber_writes_it() {
        let at = UNIX_EPOCH + Duration::new(1_795_637_805, 949_903_512);
        assert_eq!(text(at), "2026-11-25T20:16:45.949903Z");
        // The cached second, then the next one.
        assert_eq!(
            text(at + Duration::from_micros(7)),
            "2026-11-25T20:16:45.949910Z"
        );
        assert_eq!(
            text(at + Duration::from_secs(1)),
            "2026-11-25T20:16:46.949903Z"
        );
        assert_eq!(text(UNIX_EPOCH), "1970-01-01T00:00:00.000000Z");
    }

    #[test]
    fn padding() {
        let mut out = Vec::new();
        push_padded(&mut out, 42, 6);
        push_padded(&mut out, 1_234_567, 3);
        push_padded(&mut out, 0, 1);
        assert_eq!(out, b"00004212345670");
    }
}
