//! Timestamps on the wire (RFC 3339, UTC, milliseconds) and as people read
//! them (their own time zone, named). Calendar arithmetic is jiff's.

use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan, civil};

/// `2026-11-22T05:00:37.123Z` from milliseconds since the Unix epoch.
pub fn rfc3339(ms: i64) -> String {
    match Timestamp::from_millisecond(ms) {
        Ok(t) => t.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        // Beyond jiff's range (±9999 years): no real timestamp gets here.
        Err(_) => format!("@{ms}ms"),
    }
}

/// Milliseconds since the epoch of an RFC 3339 timestamp
/// (`2026-11-22T05:00:37.123Z`, fraction optional, any offset). `None` if
/// it is not one.
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    s.parse::<Timestamp>().ok().map(|t| t.as_millisecond())
}

/// The first millisecond of the UTC calendar month `ms` falls in, and of the
/// next one.
pub fn utc_month_bounds(ms: i64) -> (i64, i64) {
    let Ok(t) = Timestamp::from_millisecond(ms) else { return (ms, ms) };
    let day = t.to_zoned(TimeZone::UTC).date();
    let first = day.first_of_month();
    let next = first.checked_add(1.month()).unwrap_or(first);
    (start_of_utc_day(first), start_of_utc_day(next))
}

fn start_of_utc_day(d: civil::Date) -> i64 {
    d.to_zoned(TimeZone::UTC).map_or(0, |z| z.timestamp().as_millisecond())
}

/// Where the CLI shows times: the user's zone (`TZ`, else the system's), or
/// UTC (`--utc`).
#[derive(Clone, Debug)]
pub struct Zone(TimeZone);

impl Zone {
    pub fn utc() -> Self {
        Self(TimeZone::UTC)
    }
    /// A zone the caller found (the CLI reads the system's: this crate
    /// does no I/O).
    pub fn new(zone: TimeZone) -> Self {
        Self(zone)
    }
    /// A POSIX TZ string such as `EST5EDT,M3.2.0,M11.1.0` (tests; no
    /// time-zone database needed).
    pub fn posix(tz: &str) -> Option<Self> {
        TimeZone::posix(tz).ok().map(Self)
    }

    /// `2026-11-22 00:00:37 EST` from an RFC 3339 timestamp; what cannot be
    /// read as one is shown as it came.
    pub fn show(&self, rfc: &str) -> String {
        match rfc.parse::<Timestamp>() {
            Ok(t) => self.show_ms(t.as_millisecond()),
            Err(_) => rfc.to_string(),
        }
    }

    /// [`Zone::show`] of milliseconds since the epoch.
    pub fn show_ms(&self, ms: i64) -> String {
        self.format_ms(ms, "%Y-%m-%d %H:%M:%S %Z")
    }

    /// `2026-11-22 00:00 EST`, for tables that need no seconds.
    pub fn show_minute_ms(&self, ms: i64) -> String {
        self.format_ms(ms, "%Y-%m-%d %H:%M %Z")
    }

    fn format_ms(&self, ms: i64, format: &str) -> String {
        match Timestamp::from_millisecond(ms) {
            Ok(t) => t.to_zoned(self.0.clone()).strftime(format).to_string(),
            Err(_) => rfc3339(ms),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_it_formats() {
        for ms in [0, 1_506_816_000_000, 951_782_400_123, 1_795_000_000_456] {
            assert_eq!(parse_rfc3339(&rfc3339(ms)), Some(ms), "{ms}");
        }
        assert_eq!(parse_rfc3339("2026-11-22T05:00:37Z"), parse_rfc3339("2026-11-22T05:00:37.000Z"));
        assert_eq!(parse_rfc3339("2026-11-22T06:00:37+01:00"), parse_rfc3339("2026-11-22T05:00:37Z"));
        for bad in ["", "2026-11-22", "2026-13-01T00:00:00Z", "2026-11-22T05:00:37", "x-y-zTa:b:cZ"] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_506_816_000_000), "2017-10-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(rfc3339(-1), "1969-12-31T23:59:59.999Z");
    }

    #[test]
    fn month_bounds_cross_years_and_leap_days() {
        let at = |s: &str| parse_rfc3339(s).unwrap_or(i64::MIN);
        assert_eq!(
            utc_month_bounds(at("2024-02-29T23:59:59.999Z")),
            (at("2024-02-01T00:00:00Z"), at("2024-03-01T00:00:00Z"))
        );
        assert_eq!(
            utc_month_bounds(at("2026-12-01T00:00:00Z")),
            (at("2026-12-01T00:00:00Z"), at("2027-01-01T00:00:00Z"))
        );
    }

    #[test]
    fn times_are_shown_in_the_zone_with_its_name() {
        let new_york = Zone::posix("EST5EDT,M3.2.0,M11.1.0").expect("posix tz");
        assert_eq!(new_york.show("2026-11-22T05:00:37.123Z"), "2026-11-22 00:00:37 EST");
        assert_eq!(new_york.show("2026-07-01T12:00:00Z"), "2026-07-01 08:00:00 EDT");
        assert_eq!(Zone::utc().show("2026-11-22T05:00:37Z"), "2026-11-22 05:00:37 UTC");
        assert_eq!(Zone::utc().show("not a time"), "not a time");
        assert_eq!(new_york.show_minute_ms(0), "1969-12-31 19:00 EST");
    }
}
