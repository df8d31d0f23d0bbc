//! The scenario as one timeline in a file next to the operator logs: kills, restarts,
//! new leaders and every delivery attempt, in seconds since the start. What to read
//! when the figures say that something was duplicated or lost.

use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::kills::Restart;
use crate::delivery::receiver::Received;

pub fn write(dir: &Path, began: Instant, restarts: &[Restart], received: &[Received]) -> PathBuf {
    let at = |t: Instant| t.saturating_duration_since(began).as_secs_f64();
    let mut lines: Vec<(f64, String)> = Vec::new();
    for (i, r) in restarts.iter().enumerate() {
        let n = i + 1;
        lines.push((at(r.killed_at), format!("kill {n} ({:?})", r.moment)));
        lines.push((at(r.restarted_at), format!("restart {n}")));
        lines.push((at(r.leading_at), format!("leader {n}")));
    }
    for r in received {
        let body = r.json();
        lines.push((
            at(r.arrived),
            format!(
                "  {} {} {} attempt {} → {}",
                body["event"].as_str().unwrap_or_default(),
                body["data"]["run_id"].as_str().unwrap_or_default(),
                body["id"].as_str().unwrap_or_default(),
                r.header("x-service-delivery-attempt"),
                r.status_sent
            ),
        ));
    }
    lines.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut text = String::new();
    for (t, line) in lines {
        let _ = writeln!(text, "{t:9.3} {line}");
    }
    let path = dir.join("timeline.txt");
    std::fs::write(&path, text).unwrap();
    path
}
