//! Cron schedules, evaluated in a time zone given as data.
//!
//! The five fields of cron (minute, hour, day of month, month, day of week)
//! with lists, ranges, steps and names, and the `@hourly`… shorthands; as
//! in Vixie cron, when both day fields are restricted a day matching either
//! is a day to run. Occurrences are local (civil) times of the schedule's
//! zone: the shell hands the zone's UTC offsets over as [`ZoneRules`] (it
//! reads the time-zone database; the core reads nothing). A local time that
//! a daylight-saving jump skips runs at the first instant after the jump; a
//! local time that occurs twice runs at its first occurrence only.

use std::fmt;

use crate::model::time::Time;

/// A parsed cron expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cron {
    minutes: u64,
    hours: u32,
    /// Bit d for day of month d (1..=31).
    days: u32,
    /// Bit m for month m (1..=12).
    months: u16,
    /// Bit w for weekday w (0 = Sunday … 6).
    weekdays: u8,
    days_restricted: bool,
    weekdays_restricted: bool,
    text: String,
}

impl fmt::Display for Cron {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Why a cron expression was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CronError {
    #[error(
        "{0:?}: a schedule has five fields (minute hour day-of-month month day-of-week, e.g. \"0 2 * * *\") or is @hourly, @daily, @weekly, @monthly or @yearly"
    )]
    Fields(String),
    #[error("{field} field {text:?}: {why}")]
    Field { field: &'static str, text: String, why: String },
    #[error("{0:?} never occurs (no such day in any of its months)")]
    Never(String),
}

const MONTHS: [&str; 12] = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// One field's bits from `text`, values in `lo..=hi`.
fn field(name: &'static str, text: &str, lo: u32, hi: u32, names: &[&str]) -> Result<u64, CronError> {
    let err = |why: String| CronError::Field { field: name, text: text.to_string(), why };
    let value = |s: &str| -> Result<u32, CronError> {
        let lower = s.to_ascii_lowercase();
        if let Some(i) = names.iter().position(|n| *n == lower) {
            return Ok(i as u32 + if name == "month" { 1 } else { 0 });
        }
        let v: u32 = s.parse().map_err(|_| err(format!("{s:?} is not a number{}", hint(names))))?;
        // Sunday is 0 or 7.
        let v = if name == "day-of-week" && v == 7 { 0 } else { v };
        if v < lo || v > hi {
            return Err(err(format!("{v} is outside {lo}-{hi}")));
        }
        Ok(v)
    };
    let mut bits = 0u64;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => {
                let step: u32 = s.parse().map_err(|_| err(format!("step {s:?} is not a number")))?;
                if step == 0 {
                    return Err(err("a step of 0".into()));
                }
                (r, step)
            }
            None => (part, 1),
        };
        let (a, b) = if range == "*" {
            (lo, if name == "day-of-week" { 6 } else { hi })
        } else if let Some((a, b)) = range.split_once('-') {
            let (a, b) = (value(a)?, value(b)?);
            // 5-7 (Friday to Sunday) is 5-6 and 0.
            if name == "day-of-week" && b == 0 && a > 0 {
                bits |= 1;
                (a, 6)
            } else {
                (a, b)
            }
        } else {
            let a = value(range)?;
            // `5/15`: from 5 to the end, every 15.
            if part.contains('/') { (a, hi) } else { (a, a) }
        };
        if a > b {
            return Err(err(format!("the range {range} goes backwards")));
        }
        let mut v = a;
        while v <= b {
            bits |= 1 << v;
            v += step;
        }
    }
    Ok(bits)
}

fn hint(names: &[&str]) -> String {
    if names.is_empty() { String::new() } else { format!(" or one of {}", names.join(", ")) }
}

impl Cron {
    pub fn parse(text: &str) -> Result<Cron, CronError> {
        let text = text.trim();
        let expanded = match text {
            "@hourly" => "0 * * * *",
            "@daily" | "@midnight" => "0 0 * * *",
            "@weekly" => "0 0 * * 0",
            "@monthly" => "0 0 1 * *",
            "@yearly" | "@annually" => "0 0 1 1 *",
            t => t,
        };
        let f: Vec<&str> = expanded.split_whitespace().collect();
        let [mi, h, dom, mo, dow] = f[..] else { return Err(CronError::Fields(text.to_string())) };
        let cron = Cron {
            minutes: field("minute", mi, 0, 59, &[])?,
            hours: field("hour", h, 0, 23, &[])? as u32,
            days: field("day-of-month", dom, 1, 31, &[])? as u32,
            months: field("month", mo, 1, 12, &MONTHS)? as u16,
            weekdays: field("day-of-week", dow, 0, 7, &WEEKDAYS)? as u8,
            days_restricted: dom != "*",
            weekdays_restricted: dow != "*",
            text: text.to_string(),
        };
        // 30 February and the like: no month of the schedule has the day.
        let longest = (1..=12u32).filter(|m| cron.months & (1 << m) != 0).map(|m| days_in(m, 2000)).max().unwrap_or(0);
        if !cron.weekdays_restricted && (1..=longest).all(|d| cron.days & (1 << d) == 0) {
            return Err(CronError::Never(text.to_string()));
        }
        Ok(cron)
    }

    fn day_matches(&self, year: i64, month: u32, day: u32) -> bool {
        let dom = self.days & (1 << day) != 0;
        let dow = self.weekdays & (1 << weekday(year, month, day)) != 0;
        match (self.days_restricted, self.weekdays_restricted) {
            (true, true) => dom || dow,
            (true, false) => dom,
            (false, true) => dow,
            (false, false) => true,
        }
    }

    /// The first occurrence strictly after `after`, within about five years.
    pub fn next_after(&self, after: Time, zone: &ZoneRules) -> Option<Time> {
        let after_s = after.as_millis().div_euclid(1000);
        // Local civil time of `after`, then scan local minutes forward.
        let local = after_s + i64::from(zone.offset_at(after_s));
        let mut day = local.div_euclid(86_400);
        let mut minute_of_day = (local.rem_euclid(86_400) / 60) as u32;
        // Start at the next local minute (occurrences are whole minutes).
        minute_of_day += 1;
        for _ in 0..(366 * 5) {
            let (y, m, d) = civil(day);
            if self.months & (1 << m) != 0 && self.day_matches(y, m, d) {
                for hm in minute_of_day..1440 {
                    let (h, mi) = (hm / 60, hm % 60);
                    if self.hours & (1 << h) == 0 || self.minutes & (1 << mi) == 0 {
                        continue;
                    }
                    let local_s = day * 86_400 + i64::from(hm) * 60;
                    let at = zone.instant_of(local_s);
                    if at > after_s {
                        return Some(Time::from_millis(at * 1000));
                    }
                }
            }
            day += 1;
            minute_of_day = 0;
        }
        None
    }
}

/// A time zone's UTC offsets over the span a schedule is evaluated in:
/// `initial` before the first transition, then each transition's offset
/// from its instant on (seconds east of UTC).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ZoneRules {
    pub initial: i32,
    /// (Unix seconds, offset from then on), ascending.
    pub transitions: Vec<(i64, i32)>,
}

impl ZoneRules {
    pub fn fixed(offset: i32) -> ZoneRules {
        ZoneRules { initial: offset, transitions: Vec::new() }
    }

    pub fn offset_at(&self, unix_s: i64) -> i32 {
        match self.transitions.partition_point(|(t, _)| *t <= unix_s) {
            0 => self.initial,
            i => self.transitions[i - 1].1,
        }
    }

    /// The instant a local time names: its first occurrence when clocks go
    /// back, the instant the jump lands on when clocks skip it.
    pub(crate) fn instant_of(&self, local_s: i64) -> i64 {
        let mut offsets: Vec<i32> = std::iter::once(self.initial).chain(self.transitions.iter().map(|t| t.1)).collect();
        offsets.sort_unstable();
        offsets.dedup();
        // Valid readings, earliest instant first (the largest offset gives the earliest).
        let mut valid: Vec<i64> = offsets
            .iter()
            .rev()
            .map(|o| local_s - i64::from(*o))
            .filter(|&t| i64::from(self.offset_at(t)) == local_s - t)
            .collect();
        valid.sort_unstable();
        if let Some(first) = valid.first() {
            return *first;
        }
        // Skipped by a jump forward: the transition that skipped it.
        let before = local_s - i64::from(self.offset_at(local_s - 86_400));
        self.transitions.iter().map(|t| t.0).find(|&t| t > before - 86_400 && t <= before).unwrap_or(before)
    }
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in(month: u32, year: i64) -> u32 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// (year, month, day) of a count of days since 1970-01-01 (Hinnant's algorithm).
pub fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Days since 1970-01-01 of a civil date.
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from(if m > 2 { m - 3 } else { m + 9 });
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// 0 = Sunday.
fn weekday(y: i64, m: u32, d: u32) -> u32 {
    // 1970-01-01 was a Thursday.
    (days_from_civil(y, m, d) + 4).rem_euclid(7) as u32
}
