//! Cron schedules (standard 5 fields, IANA time zone; a leading seconds field is
//! also accepted). Pure: which tick, if any, is due now.

use croner::Cron;
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp, Zoned};

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

/// The most missed ticks one catch-up starts (`catchupWindowMs`).
pub const MAX_CATCH_UP: usize = 100;
/// The most ticks one backfill starts.
pub const MAX_BACKFILL: usize = 1000;

/// What the schedule asks for now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    /// Start one run for each of these ticks, oldest first.
    pub run_for: Vec<Timestamp>,
    /// The tick to remember as handled.
    pub last: Timestamp,
}

/// Decides the runs due now. A schedule seen for the first time starts counting from
/// `now`. After downtime the latest missed tick runs, and with a catch-up `window` every
/// missed tick of the last `window` too (the newest [`MAX_CATCH_UP`] of them), oldest
/// first.
pub fn due(
    schedule: &Schedule,
    last: Option<Timestamp>,
    now: Timestamp,
    window: SignedDuration,
) -> Due {
    let Some(last) = last else {
        return Due {
            run_for: Vec::new(),
            last: now,
        };
    };
    let oldest = now.checked_sub(window).unwrap_or(now);
    let mut ticks = Vec::new();
    let mut at = now;
    while let Some(tick) = schedule.previous(at) {
        // The latest missed tick runs whatever the window; older ones within it.
        if tick <= last || (!ticks.is_empty() && tick < oldest) {
            break;
        }
        ticks.push(tick);
        if ticks.len() == MAX_CATCH_UP {
            break;
        }
        match tick.checked_sub(SignedDuration::from_millis(1)) {
            Ok(before) => at = before,
            Err(_) => break,
        }
    }
    ticks.reverse();
    Due {
        last: ticks.last().copied().unwrap_or(last),
        run_for: ticks,
    }
}

/// The ticks from `from` to `to` (both included), oldest first; `Err` with the count
/// reached when there are more than [`MAX_BACKFILL`].
pub fn ticks_between(
    schedule: &Schedule,
    from: Timestamp,
    to: Timestamp,
) -> Result<Vec<Timestamp>, usize> {
    let mut ticks = Vec::new();
    let mut at = from;
    // `next` is exclusive: the first tick may be `from` itself.
    if let Some(first) = schedule.previous(from).filter(|t| *t == from) {
        ticks.push(first);
    }
    while let Some(tick) = schedule.next(at) {
        if tick > to {
            break;
        }
        if ticks.len() == MAX_BACKFILL {
            return Err(ticks.len() + 1);
        }
        ticks.push(tick);
        at = tick;
    }
    Ok(ticks)
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
            due(&s, None, now, SignedDuration::ZERO),
            Due {
                run_for: Vec::new(),
                last: now
            }
        );
    }

    #[test]
    fn a_tick_runs_once() {
        let s = Schedule::parse("*/5 * * * *", None).unwrap();
        let last = ts("2026-01-10T10:00:00Z");
        let d = due(
            &s,
            Some(last),
            ts("2026-01-10T10:05:01Z"),
            SignedDuration::ZERO,
        );
        assert_eq!(d.run_for, [ts("2026-01-10T10:05:00Z")]);
        assert!(
            due(
                &s,
                Some(d.last),
                ts("2026-01-10T10:06:00Z"),
                SignedDuration::ZERO
            )
            .run_for
            .is_empty()
        );
    }

    #[test]
    fn downtime_yields_at_most_one_catch_up_run() {
        let s = Schedule::parse("*/5 * * * *", None).unwrap();
        let d = due(
            &s,
            Some(ts("2026-01-10T10:00:00Z")),
            ts("2026-01-10T13:02:00Z"),
            SignedDuration::ZERO,
        );
        assert_eq!(
            d.run_for,
            [ts("2026-01-10T13:00:00Z")],
            "only the latest missed tick"
        );
    }

    #[test]
    fn a_catch_up_window_runs_every_missed_tick_within_it_oldest_first() {
        let s = Schedule::parse("*/5 * * * *", None).unwrap();
        let last = Some(ts("2026-01-10T10:00:00Z"));
        let now = ts("2026-01-10T10:32:00Z");
        let minutes = |m: i64| SignedDuration::from_mins(m);
        for (window, first) in [
            // 10:05 … 10:30: six ticks, all within 40 minutes.
            (minutes(40), "2026-01-10T10:05:00Z"),
            // Within 15 minutes of 10:32: 10:20, 10:25, 10:30.
            (minutes(15), "2026-01-10T10:20:00Z"),
            // No window: the latest alone.
            (SignedDuration::ZERO, "2026-01-10T10:30:00Z"),
        ] {
            let d = due(&s, last, now, window);
            assert_eq!(d.run_for.first(), Some(&ts(first)), "{window:?}");
            assert_eq!(d.run_for.last(), Some(&ts("2026-01-10T10:30:00Z")));
            assert!(d.run_for.windows(2).all(|w| w[0] < w[1]), "oldest first");
            assert_eq!(d.last, ts("2026-01-10T10:30:00Z"));
        }
        // A window never reaches before the last tick handled.
        assert_eq!(due(&s, last, now, minutes(600)).run_for.len(), 6);
        // Every second for a day: the newest 100.
        let busy = Schedule::parse("* * * * * *", None).unwrap();
        let d = due(
            &busy,
            Some(ts("2026-01-09T10:00:00Z")),
            now,
            SignedDuration::from_hours(24),
        );
        assert_eq!(d.run_for.len(), MAX_CATCH_UP);
        assert_eq!(d.run_for.last(), Some(&now));
    }

    #[test]
    fn a_backfill_lists_the_ticks_between_two_times_and_is_bounded() {
        let s = Schedule::parse("0 * * * *", None).unwrap();
        let hours =
            ticks_between(&s, ts("2026-01-10T10:00:00Z"), ts("2026-01-10T13:00:00Z")).unwrap();
        assert_eq!(
            hours,
            ["10:00", "11:00", "12:00", "13:00"].map(|h| ts(&format!("2026-01-10T{h}:00Z")))
        );
        assert!(
            ticks_between(&s, ts("2026-01-10T10:30:00Z"), ts("2026-01-10T10:45:00Z"))
                .unwrap()
                .is_empty()
        );
        let busy = Schedule::parse("* * * * *", None).unwrap();
        assert_eq!(
            ticks_between(
                &busy,
                ts("2026-01-10T00:00:00Z"),
                ts("2026-01-10T16:39:00Z")
            )
            .map(|t| t.len()),
            Ok(1000)
        );
        assert!(
            ticks_between(
                &busy,
                ts("2026-01-10T00:00:00Z"),
                ts("2026-01-10T16:40:00Z")
            )
            .is_err()
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
