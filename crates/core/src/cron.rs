//! Cron schedules (standard 5 fields, IANA time zone; a leading seconds field is
//! also accepted). Pure: which tick, if any, is due now.

use croner::Cron;
use jiff::tz::TimeZone;
use jiff::{Timestamp, Zoned};

#[derive(Debug, Clone)]
pub struct Schedule {
    cron: Cron,
    tz: TimeZone,
}

impl Schedule {
    pub fn parse(expr: &str, timezone: Option<&str>) -> Result<Schedule, String> {
        let cron: Cron = expr
            .parse()
            .map_err(|e| format!("invalid cron expression {expr:?}: {e}"))?;
        let tz = match timezone {
            None => TimeZone::UTC,
            Some(name) => jiff::tz::db()
                .get(name)
                .map_err(|_| format!("unknown time zone {name:?}"))?,
        };
        Ok(Schedule { cron, tz })
    }

    /// The latest tick at or before `now`.
    pub fn previous(&self, now: Timestamp) -> Option<Timestamp> {
        let at = Zoned::new(now, self.tz.clone());
        self.cron
            .find_previous_occurrence(&at, true)
            .ok()
            .map(|z| z.timestamp())
    }

    /// The first tick after `now`.
    pub fn next(&self, now: Timestamp) -> Option<Timestamp> {
        let at = Zoned::new(now, self.tz.clone());
        self.cron
            .find_next_occurrence(&at, false)
            .ok()
            .map(|z| z.timestamp())
    }
}

/// What the schedule asks for now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    /// Start one run for this tick.
    pub run_for: Option<Timestamp>,
    /// The tick to remember as handled.
    pub last: Timestamp,
}

/// Decides the run due now. A schedule seen for the first time starts counting
/// from `now`; after downtime, only the latest missed tick runs (one catch-up run).
pub fn due(schedule: &Schedule, last: Option<Timestamp>, now: Timestamp) -> Due {
    let Some(last) = last else {
        return Due {
            run_for: None,
            last: now,
        };
    };
    match schedule.previous(now) {
        Some(tick) if tick > last => Due {
            run_for: Some(tick),
            last: tick,
        },
        _ => Due {
            run_for: None,
            last,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn ticks_follow_the_time_zone() {
        let s = Schedule::parse("0 9 * * *", Some("Europe/Paris")).unwrap();
        // 09:00 in Paris in winter is 08:00 UTC.
        assert_eq!(
            s.next(ts("2026-01-10T07:00:00Z")),
            Some(ts("2026-01-10T08:00:00Z"))
        );
        assert_eq!(
            s.previous(ts("2026-01-10T07:00:00Z")),
            Some(ts("2026-01-09T08:00:00Z"))
        );
    }

    #[test]
    fn a_new_schedule_does_not_run_for_the_past() {
        let s = Schedule::parse("*/5 * * * *", None).unwrap();
        let now = ts("2026-01-10T10:07:00Z");
        assert_eq!(
            due(&s, None, now),
            Due {
                run_for: None,
                last: now
            }
        );
    }

    #[test]
    fn a_tick_runs_once() {
        let s = Schedule::parse("*/5 * * * *", None).unwrap();
        let last = ts("2026-01-10T10:00:00Z");
        let d = due(&s, Some(last), ts("2026-01-10T10:05:01Z"));
        assert_eq!(d.run_for, Some(ts("2026-01-10T10:05:00Z")));
        assert_eq!(
            due(&s, Some(d.last), ts("2026-01-10T10:06:00Z")).run_for,
            None
        );
    }

    #[test]
    fn downtime_yields_at_most_one_catch_up_run() {
        let s = Schedule::parse("*/5 * * * *", None).unwrap();
        let d = due(
            &s,
            Some(ts("2026-01-10T10:00:00Z")),
            ts("2026-01-10T13:02:00Z"),
        );
        assert_eq!(
            d.run_for,
            Some(ts("2026-01-10T13:00:00Z")),
            "only the latest missed tick"
        );
    }

    #[test]
    fn bad_expressions_and_zones_are_errors() {
        assert!(Schedule::parse("every day", None).is_err());
        assert!(Schedule::parse("* * * * *", Some("Mars/Olympus")).is_err());
        assert!(
            Schedule::parse("*/2 * * * * *", None).is_ok(),
            "seconds field"
        );
    }
}
