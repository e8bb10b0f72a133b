//! Cost accounting: any grouping of the charges adds up to the total, and
//! an allocation is charged its share of its node for the time it held it.

use gpool_core::cost::{ChargeKey, CostGroup, CostLedger, charge, node_share};
use proptest::prelude::*;

#[test]
fn an_allocation_pays_its_share_of_the_node_for_its_time() {
    // 2 of 8 GPUs of a $24 node for 30 minutes: a quarter of $12.
    assert!((charge(24.0, node_share(8, 96_000, 2000, 0), 1800.0) - 3.0).abs() < 1e-9);
    // A quarter of one GPU (a share) of a $12.29 one-GPU node for an hour.
    assert!((charge(12.29, node_share(1, 12_000, 250, 0), 3600.0) - 12.29 / 4.0).abs() < 1e-9);
    // CPU-only work on a node without GPUs: its CPUs' share.
    assert!((charge(4.0, node_share(0, 64_000, 0, 16_000), 3600.0) - 1.0).abs() < 1e-9);
    // Nothing held, no time, or nonsense: nothing charged.
    for c in [charge(24.0, 0.5, 0.0), charge(24.0, 0.5, -5.0), charge(f64::NAN, 0.5, 10.0), charge(24.0, 0.0, 10.0)] {
        assert_eq!(c, 0.0);
    }
    assert_eq!(node_share(8, 0, 16_000, 0), 1.0, "a share never exceeds the node");
}

proptest! {
    #[test]
    fn every_grouping_adds_up_to_the_total(
        charges in prop::collection::vec((0u64..20, 0usize..4, 0usize..3, 0usize..3, 0usize..3, 0.0f64..500.0, 0.0f64..50.0), 0..60)
    ) {
        let names = ["a", "b", "c", "d"];
        let mut ledger = CostLedger::default();
        let mut total = 0.0;
        for (job, u, t, q, p, dollars, hours) in charges {
            ledger.add(
                ChargeKey { job, user: names[u].into(), team: names[t].into(), queue: names[q].into(), pool: names[p].into() },
                dollars,
                hours,
            );
            total += dollars;
        }
        prop_assert!((ledger.total() - total).abs() < 1e-6);
        for g in [CostGroup::Job, CostGroup::User, CostGroup::Team, CostGroup::Queue, CostGroup::Pool] {
            let rows = ledger.by(g);
            let sum: f64 = rows.iter().map(|r| r.1).sum();
            prop_assert!((sum - total).abs() < 1e-6, "{:?}: {} vs {}", g, sum, total);
            prop_assert!(rows.windows(2).all(|w| w[0].1 >= w[1].1), "largest spend first");
        }
    }
}
