//! Where the controller's time comes from. The controller reads time only
//! through a [`Clock`]: the daemon gives it the [`SystemClock`], tests a
//! [`ManualClock`] they move by hand, so timers (grace periods, time
//! limits, leases, back-offs) can be tested without waiting. This is the one
//! file of the controller that reads the wall clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

/// A source of time.
pub trait Clock: Send {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
    /// A monotonic reading, for measuring how long work took (never goes back).
    fn monotonic(&self) -> Duration;
}

/// The machine's clocks.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
    }

    fn monotonic(&self) -> Duration {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        START.get_or_init(std::time::Instant::now).elapsed()
    }
}

/// A clock that moves only when told to. Clones share the same time, so a
/// test keeps one and gives another to the controller.
#[derive(Clone, Debug)]
pub struct ManualClock {
    ms: Arc<AtomicI64>,
}

impl ManualClock {
    /// A clock reading `start_ms` (milliseconds since the epoch).
    pub fn new(start_ms: i64) -> ManualClock {
        ManualClock { ms: Arc::new(AtomicI64::new(start_ms)) }
    }

    /// Moves the time forward.
    pub fn advance(&self, by: Duration) {
        self.ms.fetch_add(by.as_millis() as i64, Ordering::SeqCst);
    }

    /// Moves the time to `ms`, if that is later than now (time never goes back).
    pub fn set(&self, ms: i64) {
        self.ms.fetch_max(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.ms.load(Ordering::SeqCst)
    }

    /// The manual time itself: work takes no time on a manual clock.
    fn monotonic(&self) -> Duration {
        Duration::from_millis(self.now_ms().max(0) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_forward_and_is_shared() {
        let c = ManualClock::new(1_000);
        let seen_by_controller: Box<dyn Clock> = Box::new(c.clone());
        c.advance(Duration::from_secs(2));
        assert_eq!(seen_by_controller.now_ms(), 3_000);
        c.set(2_500);
        assert_eq!(seen_by_controller.now_ms(), 3_000, "time never goes back");
        c.set(4_000);
        assert_eq!(seen_by_controller.now_ms(), 4_000);
    }
}
