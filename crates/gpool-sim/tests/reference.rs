//! The simulator against an independent reference: the averages in
//! data/traces/UPSTREAM_README.md, computed by the trace curators with a
//! minimal pool model. One node per GPU reproduces "GPUs counted as one
//! pool": a job's GPUs spread freely.

use std::time::Duration;

use gpool_core::Policy;
use gpool_sim::engine::{Estimates, SimConfig, run};
use gpool_sim::metrics::summarize;
use gpool_sim::{cluster, trace};

fn avg_jct(policy: &str, gpus: u32) -> f64 {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/traces/itp_elasticflow_cluster04.csv");
    let text = std::fs::read_to_string(path).expect("data/traces is part of the repository");
    let jobs = trace::prepare(trace::parse(&text, trace::Format::Itp).expect("trace"), None, 1.0);
    assert_eq!(jobs.len(), 15_802);
    let cfg = SimConfig {
        elastic: None,
        reservations: Vec::new(),
        estimates: Estimates::for_policy(&Policy::by_name(policy).expect("policy")),
        policy: Policy::by_name(policy).expect("policy"),
        nodes: cluster::uniform(gpus, 1, "H100-80GB"),
        restart_delay: Duration::from_secs(60),
        preemptible: false,
        sample: Duration::from_secs(3600),
        mig_planner: false,
        power_budgets: Vec::new(),
        faults: Vec::new(),
        fleet: None,
    };
    summarize(&run(&jobs, &cfg, |_, _| {}).expect("simulation")).avg_jct_s
}

#[test]
fn itp_fifo_matches_the_reference_and_sjf_within_two_percent() {
    let cases = [
        ("fifo", 640, 24_204.0, 0.01),
        ("sjf", 640, 21_524.0, 0.02),
        ("fifo", 512, 148_316.0, 0.01),
        ("sjf", 512, 29_347.0, 0.02),
    ];
    for (policy, gpus, want, tolerance) in cases {
        let got = avg_jct(policy, gpus);
        let err = (got - want).abs() / want;
        assert!(
            err <= tolerance,
            "{policy} on {gpus} GPUs: avg JCT {got:.0} s vs reference {want} s ({:.2}%)",
            err * 100.0
        );
    }
}
