//! The service replica scaler's invariants over random load: always within
//! min and max, equal inputs give equal answers, and no scale-down sooner
//! than the down delay after the last change.

use std::time::Duration;

use gpool_core::Time;
use gpool_core::service_scaler::{LoadSample, ScalerConfig, ScalerState, Target};
use proptest::prelude::*;

proptest! {
    #[test]
    fn replicas_stay_within_limits_and_never_drop_before_the_down_delay(
        min in 0u32..3, extra in 0u32..8, down_s in 1u64..120, up_s in 0u64..20,
        loads in prop::collection::vec(0.0f64..80.0, 1..400),
    ) {
        let c = ScalerConfig::new(min, min + extra, Target::InFlight(4.0), Duration::from_secs(up_s), Duration::from_secs(down_s));
        let run = || {
            let mut st = ScalerState::default();
            let mut n = min;
            let mut out = Vec::new();
            for (i, l) in loads.iter().enumerate() {
                let at = Time::from_secs(i as i64);
                st.observe(&c, LoadSample { at, in_flight: *l, rps: 0.0 });
                n = st.desired(&c, at, n).desired;
                out.push(n);
            }
            out
        };
        let a = run();
        prop_assert_eq!(&a, &run(), "deterministic");
        let mut last_change = 0usize;
        for i in 1..a.len() {
            prop_assert!(a[i] >= c.min && a[i] <= c.max, "{} outside [{}, {}]", a[i], c.min, c.max);
            if a[i] < a[i - 1] {
                prop_assert!((i - last_change) as u64 >= down_s, "down at {} s, {} s after the last change", i, i - last_change);
            }
            if a[i] != a[i - 1] {
                last_change = i;
            }
        }
    }
}
