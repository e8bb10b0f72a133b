//! The node wing's one reading of the wall clock: milliseconds since the
//! epoch, for what it records and reports (exit records, samples, pull
//! progress, spot notices). Leases are measured on the monotonic clock
//! instead (`lease::monotonic_ms`): they must not move with the wall clock.

/// Milliseconds since the Unix epoch (0 before it).
pub fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
