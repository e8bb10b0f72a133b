//! Queue windows: the weekly local hours in which a queue's jobs may start
//! (`windows: [{days: mon-fri, from: "20:00", to: "07:00"}]`), for off-peak
//! batch work. A window whose end is not after its start runs past
//! midnight into the next day. Times are local to the queue's time zone,
//! whose offsets the shell gives as [`ZoneRules`]; the core reads no clock.

use crate::calendar::cron::{ZoneRules, days_from_civil};
use crate::model::time::Time;

/// One weekly window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    /// Bit d for the days it starts on (0 = Sunday … 6).
    pub days: u8,
    /// Minutes after local midnight.
    pub from: u16,
    /// Minutes after local midnight; at or before `from`: the next day.
    pub to: u16,
}

/// A queue's windows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueWindows {
    pub windows: Vec<Window>,
    pub zone: ZoneRules,
    /// Running jobs of the queue are stopped (and requeued) when its windows close.
    pub stop_at_end: bool,
}

fn weekday(day: i64) -> u32 {
    (day + 4).rem_euclid(7) as u32
}

impl QueueWindows {
    /// Whether the queue's jobs may start at `t`.
    pub fn is_open(&self, t: Time) -> bool {
        let s = t.as_millis().div_euclid(1000);
        let local = s + i64::from(self.zone.offset_at(s));
        let (day, sod) = (local.div_euclid(86_400), local.rem_euclid(86_400));
        let on = |w: &Window, d: i64| w.days & (1 << weekday(d)) != 0;
        self.windows.iter().any(|w| {
            let (from, to) = (i64::from(w.from) * 60, i64::from(w.to) * 60);
            if from < to {
                on(w, day) && sod >= from && sod < to
            } else {
                (on(w, day) && sod >= from) || (on(w, day - 1) && sod < to)
            }
        })
    }

    /// The first instant after `t` at which the queue opens or closes
    /// (within the next eight days; `None` if it never changes).
    pub fn next_change(&self, t: Time) -> Option<Time> {
        let s = t.as_millis().div_euclid(1000);
        let local = s + i64::from(self.zone.offset_at(s));
        let today = local.div_euclid(86_400);
        let mut bounds: Vec<i64> = Vec::new();
        for d in today - 1..today + 9 {
            for w in &self.windows {
                let midnight = d * 86_400;
                bounds.push(self.zone.instant_of(midnight + i64::from(w.from) * 60));
                bounds.push(self.zone.instant_of(midnight + i64::from(w.to) * 60));
            }
        }
        bounds.retain(|b| *b > s);
        bounds.sort_unstable();
        bounds.dedup();
        let now_open = self.is_open(t);
        bounds.into_iter().map(|b| Time::from_millis(b * 1000)).find(|b| self.is_open(*b) != now_open)
    }
}

/// Parses `mon-fri`, `sat,sun`, `*`, `daily` into a day mask.
pub fn parse_days(text: &str) -> Result<u8, String> {
    const NAMES: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
    let day = |s: &str| {
        let l = s.trim().to_ascii_lowercase();
        NAMES
            .iter()
            .position(|n| l.starts_with(n) && n.len() <= l.len())
            .map(|i| i as u32)
            .ok_or_else(|| format!("{s:?} is not a day (mon, tue, wed, thu, fri, sat, sun)"))
    };
    let t = text.trim();
    if t == "*" || t.eq_ignore_ascii_case("daily") || t.is_empty() {
        return Ok(0x7f);
    }
    let mut mask = 0u8;
    for part in t.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (day(a)?, day(b)?);
                let mut d = a;
                loop {
                    mask |= 1 << d;
                    if d == b {
                        break;
                    }
                    d = (d + 1) % 7;
                }
            }
            None => mask |= 1 << day(part)?,
        }
    }
    Ok(mask)
}

/// Parses `HH:MM` (24-hour) into minutes after midnight; `24:00` is the end of the day.
pub fn parse_clock(text: &str) -> Result<u16, String> {
    let bad = || format!("{text:?} is not a time of day like \"20:00\" or \"07:30\"");
    let (h, m) = text.trim().split_once(':').ok_or_else(bad)?;
    let (h, m): (u16, u16) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
    if m > 59 || h > 24 || (h == 24 && m > 0) {
        return Err(bad());
    }
    Ok(h * 60 + m)
}

/// Unix seconds of a local civil time in `zone` (for tests and messages).
pub fn local_instant(zone: &ZoneRules, y: i64, month: u32, d: u32, minute_of_day: u32) -> Time {
    Time::from_millis(zone.instant_of(days_from_civil(y, month, d) * 86_400 + i64::from(minute_of_day) * 60) * 1000)
}
