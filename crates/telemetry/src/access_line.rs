//! The access-log line, formatted by hand into the log writer's buffer: the very bytes
//! tracing-subscriber's fmt layer writes for the `flowline::access` event (text, with or
//! without ANSI styles, or JSON; the tests compare the two), without its costs on the
//! request path (field visitors, `fmt::Debug` of every value, a thread-local string,
//! ANSI style objects: about 8% of a worker's time serving a single GET).
//!
//! Untrusted values (the path above all) are escaped as the fmt layer escapes them:
//! Rust's `Debug` for strings in text, JSON string escapes in JSON, so quotes,
//! newlines and control characters cannot end a field or a line early.

use std::io::Write as _;
use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use super::timestamp;

/// The target the line is logged under (and filtered by, `RUST_LOG`).
pub const TARGET: &str = "flowline::access";

/// How lines are written: the process's `--log-format` and whether styles are on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    Text { ansi: bool },
    Json,
}

/// The level of an access line: probes and scrapes are logged at debug.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Info,
    Debug,
}

/// One request's line.
#[derive(Clone, Copy, Debug)]
pub struct AccessLine<'a> {
    pub level: Level,
    /// Sane by construction (`access_log::request_id`): written bare in text.
    pub request_id: &'a str,
    /// An HTTP method token (the http crate admits no spaces or quotes): bare in text.
    pub method: &'a str,
    pub route: &'a str,
    pub path: &'a str,
    pub status: u16,
    pub took: Duration,
    pub peer: Option<IpAddr>,
    pub account: Option<&'a str>,
    pub trace_id: Option<&'a str>,
}

// ANSI sequences of tracing-subscriber's text format (nu-ansi-term).
const DIM: &[u8] = b"\x1b[2m";
const ITALIC: &[u8] = b"\x1b[3m";
const GREEN: &[u8] = b"\x1b[32m";
const BLUE: &[u8] = b"\x1b[34m";
const RESET: &[u8] = b"\x1b[0m";

impl AccessLine<'_> {
    /// Appends the line, newline included, to `out`.
    pub fn write(&self, out: &mut Vec<u8>, style: Style, at: SystemTime) {
        match style {
            Style::Text { ansi } => self.write_text(out, ansi, at),
            Style::Json => self.write_json(out, at),
        }
    }

    fn write_text(&self, out: &mut Vec<u8>, ansi: bool, at: SystemTime) {
        let (level, color) = match self.level {
            Level::Info => (&b" INFO"[..], GREEN),
            Level::Debug => (&b"DEBUG"[..], BLUE),
        };
        styled(out, ansi, DIM, |out| timestamp::write(out, at));
        out.push(b' ');
        styled(out, ansi, color, |out| out.extend_from_slice(level));
        out.push(b' ');
        styled(out, ansi, DIM, |out| {
            out.extend_from_slice(TARGET.as_bytes())
        });
        styled(out, ansi, DIM, |out| out.push(b':'));
        out.extend_from_slice(b" request");
        let mut field = |name: &str, value: &dyn Fn(&mut Vec<u8>)| {
            out.push(b' ');
            styled(out, ansi, ITALIC, |out| {
                out.extend_from_slice(name.as_bytes())
            });
            styled(out, ansi, DIM, |out| out.push(b'='));
            value(out);
        };
        field("request_id", &|out| {
            out.extend_from_slice(self.request_id.as_bytes())
        });
        field("method", &|out| {
            out.extend_from_slice(self.method.as_bytes())
        });
        field("route", &|out| debug_str(out, self.route));
        field("path", &|out| debug_str(out, self.path));
        field("status", &|out| push_u64(out, self.status.into()));
        field("duration_ms", &|out| push_millis(out, self.took));
        field("peer", &|out| push_peer(out, self.peer));
        if let Some(account) = self.account {
            field("account", &|out| debug_str(out, account));
        }
        if let Some(trace_id) = self.trace_id {
            field("trace_id", &|out| debug_str(out, trace_id));
        }
        out.push(b'\n');
    }

    fn write_json(&self, out: &mut Vec<u8>, at: SystemTime) {
        out.extend_from_slice(b"{\"timestamp\":\"");
        timestamp::write(out, at);
        out.extend_from_slice(match self.level {
            Level::Info => b"\",\"level\":\"INFO\"",
            Level::Debug => b"\",\"level\":\"DEBUG\"",
        });
        out.extend_from_slice(b",\"fields\":{\"message\":\"request\",\"request_id\":");
        json_str(out, self.request_id);
        out.extend_from_slice(b",\"method\":");
        json_str(out, self.method);
        out.extend_from_slice(b",\"route\":");
        json_str(out, self.route);
        out.extend_from_slice(b",\"path\":");
        json_str(out, self.path);
        out.extend_from_slice(b",\"status\":");
        push_u64(out, self.status.into());
        out.extend_from_slice(b",\"duration_ms\":");
        push_millis(out, self.took);
        out.extend_from_slice(b",\"peer\":\"");
        push_peer(out, self.peer);
        out.push(b'"');
        if let Some(account) = self.account {
            out.extend_from_slice(b",\"account\":");
            json_str(out, account);
        }
        if let Some(trace_id) = self.trace_id {
            out.extend_from_slice(b",\"trace_id\":");
            json_str(out, trace_id);
        }
        out.extend_from_slice(b"},\"target\":\"flowline::access\"}\n");
    }
}

/// `write` between `style` and a reset when styles are on.
fn styled(out: &mut Vec<u8>, ansi: bool, style: &[u8], write: impl FnOnce(&mut Vec<u8>)) {
    if ansi {
        out.extend_from_slice(style);
    }
    write(out);
    if ansi {
        out.extend_from_slice(RESET);
    }
}

/// Printable ASCII other than a quote or a backslash: written as is by both escapes.
fn is_plain(s: &str) -> bool {
    s.bytes()
        .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
}

/// Writes `s` in quotes when it needs no escaping (the same text in both formats);
/// false, writing nothing, when it does.
fn push_plain(out: &mut Vec<u8>, s: &str) -> bool {
    let plain = is_plain(s);
    if plain {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    }
    plain
}

/// `s` as `{:?}` writes it (what the fmt layer does for a string field in text).
fn debug_str(out: &mut Vec<u8>, s: &str) {
    if !push_plain(out, s) {
        // Writing to a Vec cannot fail.
        let _ = write!(out, "{s:?}");
    }
}

/// `s` as a JSON string (serde_json's escapes, as the fmt layer's JSON format).
fn json_str(out: &mut Vec<u8>, s: &str) {
    if !push_plain(out, s) {
        // Serializing a str into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, s);
    }
}

fn push_u64(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// Milliseconds with up to six decimals (the nanoseconds the clock gave), trailing
/// zeros dropped but one kept: `1.5`, `2.0`, `0.122062` (a float, as before, in text
/// and JSON alike).
fn push_millis(out: &mut Vec<u8>, took: Duration) {
    let nanos = took.as_nanos();
    push_u64(out, u64::try_from(nanos / 1_000_000).unwrap_or(u64::MAX));
    out.push(b'.');
    let mut fraction = (nanos % 1_000_000) as u32;
    let mut width = 6;
    while width > 1 && fraction.is_multiple_of(10) {
        fraction /= 10;
        width -= 1;
    }
    timestamp::push_padded(out, fraction, width);
}

/// The duration the event path logs (`access_log`): the nanoseconds divided once, so
/// the float prints as [`push_millis`] writes it (`as_secs_f64() * 1000.0` printed
/// `0.058817999999999995`).
pub fn millis_f64(took: Duration) -> f64 {
    took.as_nanos() as f64 / 1e6
}

/// The connection's address, `-` without one (in-process callers).
fn push_peer(out: &mut Vec<u8>, peer: Option<IpAddr>) {
    match peer {
        // Writing to a Vec cannot fail.
        Some(ip) => {
            let _ = write!(out, "{ip}");
        }
        None => out.push(b'-'),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::captured::Captured;
    use std::time::UNIX_EPOCH;
    use tracing_subscriber::fmt::format::Writer;
    use tracing_subscriber::fmt::time::FormatTime;

    /// 2026-11-25T20:16:45.949903Z
    fn at() -> SystemTime {
        UNIX_EPOCH + Duration::new(1_795_637_805, 949_903_000)
    }

    fn line<'a>(path: &'a str, account: Option<&'a str>) -> AccessLine<'a> {
        AccessLine {
            level: Level::Info,
            request_id: "req_o8p6m5o9kq",
            method: "GET",
            route: "/v1/workflows/{id}",
            path,
            status: 200,
            took: Duration::from_micros(1_500),
            peer: Some(IpAddr::from([127, 0, 0, 1])),
            account,
            trace_id: None,
        }
    }

    fn ours(line: &AccessLine<'_>, style: Style) -> String {
        let mut out = Vec::new();
        line.write(&mut out, style, at());
        String::from_utf8(out).unwrap()
    }

    struct Fixed;

    impl FormatTime for Fixed {
        fn format_time(&self, w: &mut Writer<'_>) -> std::fmt::Result {
            w.write_str("2026-11-25T20:16:45.949903Z")
        }
    }

    /// What the fmt layer writes for the event `access_log` logged before this module
    /// existed (and still logs when traces are on).
    fn theirs(line: &AccessLine<'_>, style: Style) -> String {
        let captured = Captured::default();
        let builder = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_timer(Fixed)
            .with_writer(captured.clone());
        let dispatch = match style {
            Style::Json => tracing::Dispatch::new(builder.json().finish()),
            Style::Text { ansi } => tracing::Dispatch::new(builder.with_ansi(ansi).finish()),
        };
        let duration_ms = millis_f64(line.took);
        let peer = line.peer.map_or("-".to_string(), |p| p.to_string());
        let AccessLine {
            request_id: id,
            method,
            route,
            path,
            status,
            account,
            trace_id,
            ..
        } = *line;
        tracing::dispatcher::with_default(&dispatch, || match line.level {
            Level::Info => {
                tracing::info!(target: "flowline::access", request_id = %id, %method, route, path, status, duration_ms, %peer, account, trace_id, "request")
            }
            Level::Debug => {
                tracing::debug!(target: "flowline::access", request_id = %id, %method, route, path, status, duration_ms, %peer, account, trace_id, "request")
            }
        });
        captured.text()
    }

    const STYLES: [Style; 3] = [
        Style::Text { ansi: false },
        Style::Text { ansi: true },
        Style::Json,
    ];

    #[test]
    fn the_line_is_what_the_fmt_layer_writes() {
        let mut probe = line("/healthz", None);
        probe.level = Level::Debug;
        probe.route = "/healthz";
        probe.peer = None;
        probe.took = Duration::from_millis(2);
        let mut traced = line("/v1/workflows/wf-1", Some("team-a"));
        traced.trace_id = Some("4bf92f3577b34da6a3ce929d0e0e4736");
        traced.status = 503;
        traced.peer = Some("::1".parse().unwrap());
        traced.took = Duration::from_nanos(58_818_001);
        let mut odd = line("/v1/workflows/wf-42", Some("hapi2-bench"));
        odd.took = Duration::from_nanos(122_062);
        for style in STYLES {
            for l in [
                line("/v1/workflows/wf-42", Some("hapi2-bench")),
                line("/v1/work%22flo%0Aws/x\"y", None),
                probe,
                traced,
                odd,
            ] {
                assert_eq!(ours(&l, style), theirs(&l, style), "{style:?} {l:?}");
            }
        }
    }

    #[test]
    fn the_plain_text_line() {
        assert_eq!(
            ours(
                &line("/v1/workflows/wf-42", Some("team-a")),
                Style::Text { ansi: false }
            ),
            "2026-11-25T20:16:45.949903Z  INFO flowline::access: request request_id=req_o8p6m5o9kq \
             method=GET route=\"/v1/workflows/{id}\" path=\"/v1/workflows/wf-42\" status=200 \
             duration_ms=1.5 peer=127.0.0.1 account=\"team-a\"\n"
        );
    }

    /// Hostile bytes in the path (the one value a client chooses freely) stay inside
    /// its field: one line, no raw control characters, and the fields after it intact.
    #[test]
    fn hostile_values_cannot_forge_lines_or_fields() {
        let hostile = [
            "/v1/x\n2026-11-25T00:00:00.000000Z  INFO flowline::access: request status=200",
            "/v1/x\" status=200 account=\"root",
            "/v1/x\r\u{1b}[2J\u{7}\0\\",
            "/v1/\u{7f}\u{85}\u{2028}\u{2029}é",
            "/v1/x\"},\"target\":\"forged\"}\n{\"level\":\"INFO",
        ];
        for path in hostile {
            let l = line(path, Some("team-a"));
            for style in STYLES {
                let text = ours(&l, style);
                assert_eq!(text, theirs(&l, style), "{style:?} {path:?}");
                let body = text.strip_suffix('\n').unwrap();
                assert!(
                    !body.contains(['\n', '\r', '\0', '\u{7}']),
                    "{style:?}: {text:?}"
                );
                match style {
                    Style::Json => {
                        // Within a JSON string: U+0085 and U+2028 stay raw, as serde_json
                        // writes them; no JSON-lines reader splits on them.
                        let v: serde_json::Value = serde_json::from_str(body).unwrap();
                        assert_eq!(v["fields"]["path"], path);
                        assert_eq!(v["fields"]["account"], "team-a");
                        assert_eq!(v["target"], "flowline::access");
                    }
                    Style::Text { ansi: true } => {}
                    Style::Text { ansi: false } => {
                        assert!(!body.contains(['\u{1b}', '\u{85}', '\u{2028}']), "{text:?}");
                        assert!(body.ends_with("account=\"team-a\""), "{text:?}");
                        // The path's field is one quoted Debug string.
                        let after = body.split_once(" path=").unwrap().1;
                        let quoted = &after[..after.find(" status=200 duration_ms").unwrap()];
                        assert_eq!(quoted, format!("{path:?}"));
                    }
                }
            }
        }
    }

    #[test]
    fn milliseconds() {
        let ms = |nanos: u64| {
            let mut out = Vec::new();
            push_millis(&mut out, Duration::from_nanos(nanos));
            String::from_utf8(out).unwrap()
        };
        assert_eq!(ms(1_500_000), "1.5");
        assert_eq!(ms(2_000_000), "2.0");
        assert_eq!(ms(122_062), "0.122062");
        assert_eq!(ms(58_818_001), "58.818001");
        assert_eq!(ms(12_345_000_000), "12345.0");
    }
}
