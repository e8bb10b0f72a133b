//! Time as the core sees it: a number passed in, never read from a clock.
//!
//! The daemon passes wall-clock milliseconds since the Unix epoch; the
//! simulator passes virtual milliseconds since the start of a trace. The core
//! only ever compares and subtracts them.

use std::fmt;
use std::time::Duration;

/// A point in time, in milliseconds on the caller's time line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Time(pub i64);

impl Time {
    /// The earliest representable time.
    pub const MIN: Time = Time(i64::MIN);
    /// A time later than any real one: "never".
    pub const NEVER: Time = Time(i64::MAX);

    /// Milliseconds since the caller's epoch.
    pub const fn from_millis(ms: i64) -> Time {
        Time(ms)
    }

    /// Seconds since the caller's epoch.
    pub const fn from_secs(s: i64) -> Time {
        Time(s.saturating_mul(1000))
    }

    /// Milliseconds since the caller's epoch.
    pub const fn as_millis(self) -> i64 {
        self.0
    }

    /// Seconds since the caller's epoch, as a float.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1000.0
    }

    /// This time moved forward by `d`, saturating at [`Time::NEVER`].
    pub fn plus(self, d: Duration) -> Time {
        let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        Time(self.0.saturating_add(ms))
    }

    /// This time moved back by `d`, saturating at [`Time::MIN`].
    pub fn minus(self, d: Duration) -> Time {
        let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        Time(self.0.saturating_sub(ms))
    }

    /// The time elapsed since `earlier`, zero if `earlier` is later.
    pub fn since(self, earlier: Time) -> Duration {
        let ms = self.0.saturating_sub(earlier.0);
        Duration::from_millis(u64::try_from(ms).unwrap_or(0))
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Time::NEVER {
            return f.write_str("never");
        }
        write!(f, "t={}s", self.0 / 1000)
    }
}

/// Formats a duration the way people read job times: `45s`, `12m`, `3h20m`, `2d4h`.
pub fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    if s < 120 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m", s / 60)
    } else if s < 86_400 {
        let (h, m) = (s / 3600, (s % 3600) / 60);
        if m == 0 { format!("{h}h") } else { format!("{h}h{m}m") }
    } else {
        let (d, h) = (s / 86_400, (s % 86_400) / 3600);
        if h == 0 { format!("{d}d") } else { format!("{d}d{h}h") }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_instead_of_overflowing() {
        assert_eq!(Time::NEVER.plus(Duration::from_secs(5)), Time::NEVER);
        assert_eq!(Time(10).since(Time(20)), Duration::ZERO);
        assert_eq!(Time(2500).since(Time(500)), Duration::from_secs(2));
    }

    #[test]
    fn durations_read_like_a_human_wrote_them() {
        let cases = [(5, "5s"), (119, "119s"), (600, "10m"), (7200, "2h"), (12_000, "3h20m"), (187_200, "2d4h")];
        for (secs, want) in cases {
            assert_eq!(human_duration(Duration::from_secs(secs)), want, "{secs}s");
        }
    }
}
