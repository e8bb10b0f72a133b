//! Small traces whose schedules can be worked out by hand, one per policy.
//! Each case lists the expected (start, end) of every job, in trace order.

use std::time::Duration;

use gpool_core::Policy;
use gpool_sim::cluster;
use gpool_sim::engine::{Estimates, SimConfig, run};
use gpool_sim::metrics::summarize;
use gpool_sim::trace::{Format, parse};

struct Case {
    name: &'static str,
    policy: &'static str,
    gpus: u32,
    restart_delay: u64,
    /// Generic CSV rows: submit,duration,gpus,user
    rows: &'static str,
    /// (first start, end) per job in file order.
    want: &'static [(f64, f64)],
}

const CASES: &[Case] = &[
    Case {
        name: "strict FIFO: the long head job delays both others",
        policy: "fifo",
        gpus: 1,
        restart_delay: 0,
        rows: "0,100,1,a\n1,50,1,a\n2,10,1,a",
        want: &[(0.0, 100.0), (100.0, 150.0), (150.0, 160.0)],
    },
    Case {
        name: "SJF: the 10 s job overtakes the 50 s one",
        policy: "sjf",
        gpus: 1,
        restart_delay: 0,
        rows: "0,100,1,a\n1,50,1,a\n2,10,1,a",
        want: &[(0.0, 100.0), (110.0, 160.0), (100.0, 110.0)],
    },
    Case {
        name: "SRTF: each arrival preempts the job with more time left",
        policy: "srtf",
        gpus: 1,
        restart_delay: 0,
        rows: "0,100,1,a\n1,50,1,a\n2,10,1,a",
        // B preempts A at 1, C preempts B at 2; C 2–12, B 12–61, A 61–160.
        want: &[(0.0, 160.0), (1.0, 61.0), (2.0, 12.0)],
    },
    Case {
        name: "SRTF pays the restart delay on every resumed run",
        policy: "srtf",
        gpus: 1,
        restart_delay: 60,
        rows: "0,100,1,a\n1,50,1,a",
        // B preempts A at 1 and ends at 51; A resumes, loses 60 s, has 99 s left: ends at 210.
        want: &[(0.0, 210.0), (1.0, 51.0)],
    },
    Case {
        name: "LAS: a fresh job preempts one past the 3,200 GPU-second level",
        policy: "las",
        gpus: 1,
        restart_delay: 0,
        rows: "0,10000,1,a\n5000,100,1,b",
        want: &[(0.0, 10100.0), (5000.0, 5100.0)],
    },
    Case {
        name: "EASY: a short job backfills before the reservation, a long one does not",
        policy: "fifo-backfill",
        gpus: 2,
        restart_delay: 0,
        rows: "0,100,1,a\n1,100,2,a\n2,50,1,a\n3,200,1,a",
        want: &[(0.0, 100.0), (100.0, 200.0), (2.0, 52.0), (200.0, 400.0)],
    },
    Case {
        name: "max-min fairness: the user holding nothing goes before an earlier job of the user holding one",
        policy: "fair",
        gpus: 2,
        restart_delay: 0,
        rows: "0,100,1,a\n0,200,1,a\n0,100,1,a\n1,100,1,b",
        want: &[(0.0, 100.0), (0.0, 200.0), (200.0, 300.0), (100.0, 200.0)],
    },
    Case {
        name: "default: a burst the cluster absorbs in under 6 h preempts nothing",
        policy: "default",
        gpus: 1,
        restart_delay: 60,
        // B's arrival overloads the cluster (1 GPU wanted, 1 GPU); A ends 2.8 h later.
        rows: "0,50000,1,a\n40000,100,1,b",
        want: &[(0.0, 50000.0), (50000.0, 50100.0)],
    },
    Case {
        name: "default: after 6 h of overload, a job two service levels ahead is preempted and resumes after the restart delay",
        policy: "default",
        gpus: 1,
        restart_delay: 60,
        // Overloaded from 40,000 s, so preemption acts at 61,600 s (a pass
        // the plan asks for: no job arrives or ends then). A has 61,600 GPU-s
        // (level 2); B has none: 2 levels (2,000 points) ≥ the 1,000-point
        // margin (the default has no age term). A resumes at 61,700 s, pays
        // 60 s, and runs its last 38,400 s.
        rows: "0,100000,1,a\n40000,100,1,b",
        want: &[(0.0, 100160.0), (61600.0, 61700.0)],
    },
    Case {
        name: "default: after 6 h of overload, a job one level ahead is preempted (Tiresias: any lower level)",
        policy: "default",
        gpus: 1,
        restart_delay: 60,
        // Overloaded from 6,000 s, so preemption acts at 27,600 s. A is at
        // level 1 (27,600 GPU-s), B at 0: one level is the margin. (The
        // default before issue 15 let B's 1.7 h of youth count against it,
        // and A ran on.) A resumes at 27,700 s, pays 60 s, runs its last 7,400 s.
        rows: "0,35000,1,a\n6000,100,1,b",
        want: &[(0.0, 35160.0), (27600.0, 27700.0)],
    },
    Case {
        name: "gangs wait for all their GPUs; no node packing on 1-GPU nodes",
        policy: "fifo",
        gpus: 3,
        restart_delay: 0,
        rows: "0,100,2,a\n1,50,2,a\n2,10,1,a",
        // C (1 GPU) is stuck behind B (2 GPUs) until A frees its two: then B and C start together.
        want: &[(0.0, 100.0), (100.0, 150.0), (100.0, 110.0)],
    },
];

#[test]
fn hand_computed_schedules() {
    for c in CASES {
        let text = format!("submit,duration,gpus,user\n{}\n", c.rows);
        let jobs = parse(&text, Format::Csv).expect("trace");
        let policy = Policy::by_name(c.policy).expect("policy");
        let cfg = SimConfig {
            elastic: None,
            reservations: Vec::new(),
            estimates: Estimates::for_policy(&policy),
            policy,
            nodes: cluster::uniform(c.gpus, 1, "H100-80GB"),
            restart_delay: Duration::from_secs(c.restart_delay),
            preemptible: true,
            sample: Duration::from_secs(60),
            mig_planner: false,
            power_budgets: Vec::new(),
            faults: Vec::new(),
            fleet: None,
        };
        let r = run(&jobs, &cfg, |_, _| {}).expect("simulation");
        let mut got: Vec<(usize, f64, f64)> =
            r.jobs.iter().map(|j| (j.line, j.first_start_s.unwrap_or(f64::NAN), j.end_s.unwrap_or(f64::NAN))).collect();
        got.sort_by_key(|g| g.0);
        let got: Vec<(f64, f64)> = got.into_iter().map(|(_, s, e)| (s, e)).collect();
        assert_eq!(got, c.want, "{}", c.name);
        let s = summarize(&r);
        let submits: Vec<f64> = text.lines().skip(1).filter_map(|l| l.split(',').next()?.parse().ok()).collect();
        let want_avg = c.want.iter().zip(submits).map(|((_, e), sub)| e - sub).sum::<f64>() / c.want.len() as f64;
        assert!((s.avg_jct_s - want_avg).abs() < 1e-9, "{}: avg JCT {} vs {want_avg}", c.name, s.avg_jct_s);
    }
}

#[test]
fn utilisation_and_makespan_follow_their_definitions() {
    // Two 1-GPU jobs of 100 s side by side on 2 GPUs: busy 200 GPU-s over 2 GPUs × 100 s.
    let jobs = parse("submit,duration,gpus\n0,100,1\n0,100,1\n", Format::Csv).expect("trace");
    let cfg = SimConfig {
        elastic: None,
        reservations: Vec::new(),
        policy: Policy::by_name("fifo").expect("policy"),
        nodes: cluster::uniform(2, 1, "H100-80GB"),
        estimates: Estimates::None,
        restart_delay: Duration::ZERO,
        preemptible: false,
        sample: Duration::from_secs(10),
        mig_planner: false,
        power_budgets: Vec::new(),
        faults: Vec::new(),
        fleet: None,
    };
    let r = run(&jobs, &cfg, |_, _| {}).expect("simulation");
    let s = summarize(&r);
    assert_eq!((s.jobs, s.makespan_s, s.gpu_utilization), (2, 100.0, 1.0));
    assert_eq!(r.series.len(), 10);
    assert!(r.series.iter().all(|b| (b.utilization - 1.0).abs() < 1e-9), "{:?}", r.series);
}

#[test]
fn impossible_jobs_are_rejected_not_lost() {
    let jobs = parse("submit,duration,gpus,gpu_model\n0,10,16,\n0,10,1,B200\n0,10,1,\n", Format::Csv).expect("trace");
    let cfg = SimConfig {
        elastic: None,
        reservations: Vec::new(),
        policy: Policy::gpool_default(),
        nodes: cluster::uniform(1, 8, "H100-80GB"),
        estimates: Estimates::None,
        restart_delay: Duration::ZERO,
        preemptible: true,
        sample: Duration::from_secs(60),
        mig_planner: false,
        power_budgets: Vec::new(),
        faults: Vec::new(),
        fleet: None,
    };
    let r = run(&jobs, &cfg, |_, _| {}).expect("simulation");
    assert_eq!(r.jobs.len(), 1);
    assert_eq!(r.rejected.iter().map(|(l, _)| *l).collect::<Vec<_>>(), vec![2, 3]);
    assert!(r.rejected[1].1.contains("B200"), "{:?}", r.rejected);
}
