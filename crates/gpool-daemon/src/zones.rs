//! Time zones for the core: the offsets of an IANA zone, read from the
//! system's time-zone database (jiff), handed to the pure core as
//! [`ZoneRules`] for schedules (`plane/controller/schedules.rs`) and queue
//! windows (`wiring.rs`).

use gpool_core::Time;
use gpool_core::cron::ZoneRules;

/// A zone by its IANA name (`Europe/Paris`, `UTC`), or why it cannot be had.
pub fn load(name: &str) -> Result<jiff::tz::TimeZone, String> {
    jiff::tz::TimeZone::get(name).map_err(|e| {
        format!(
            "{name:?} is not a time zone this machine knows ({e}); use an IANA name such as Europe/Paris or UTC (the system's time-zone database, package tzdata)"
        )
    })
}

/// The zone's offsets from a day before `from` to six years after.
pub fn rules(zone: &jiff::tz::TimeZone, from: Time) -> ZoneRules {
    let start = from.as_millis() / 1000 - 86_400;
    let Ok(ts) = jiff::Timestamp::from_second(start) else { return ZoneRules::fixed(0) };
    let end = start + 6 * 366 * 86_400;
    let transitions = zone
        .following(ts)
        .take_while(|t| t.timestamp().as_second() <= end)
        .take(64)
        .map(|t| (t.timestamp().as_second(), t.offset().seconds()))
        .collect();
    ZoneRules { initial: zone.to_offset(ts).seconds(), transitions }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zone_with_daylight_saving_has_its_transitions() {
        let Ok(paris) = load("Europe/Paris") else {
            // A machine without tzdata says so at load; nothing more to check here.
            return;
        };
        // 2026-01-01T00:00:00Z: winter (+1); the spring change is 29 March, 01:00 UTC.
        let r = rules(&paris, Time::from_secs(1_767_225_600));
        assert_eq!(r.initial, 3600);
        assert_eq!(r.transitions.first(), Some(&(1_774_746_000, 7200)));
        assert_eq!(r.offset_at(1_774_746_000 - 1), 3600);
        let utc = rules(&load("UTC").expect("UTC is always known"), Time::from_secs(0));
        assert_eq!((utc.initial, utc.transitions.len()), (0, 0));
        assert!(load("Mars/Olympus").expect_err("unknown").contains("not a time zone"));
    }
}
