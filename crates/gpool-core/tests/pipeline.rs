//! Issue 17: pipelines. A pipeline's `needs:` must form a DAG (cycles,
//! unknown and duplicate stages are refused, naming the stage); a stage's
//! matrix fans it out; and once its stages are jobs that depend on the
//! instances they need, the scheduler starts a stage only after everything
//! it needs succeeded, and never one after a failure or a cancellation.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use gpool_core::pipeline::{self, Instance, PipelineError, RunState, StageShape, StageState};
use gpool_core::{JobId, PendingReason, StopOutcome, Time};
use proptest::prelude::*;

fn stage(name: &str, needs: &[&str]) -> StageShape {
    StageShape { name: name.into(), needs: needs.iter().map(|s| s.to_string()).collect(), matrix: BTreeMap::new() }
}

fn with_matrix(mut s: StageShape, key: &str, values: &[&str]) -> StageShape {
    s.matrix.insert(key.into(), values.iter().map(|v| v.to_string()).collect());
    s
}

#[test]
fn malformed_pipelines_are_refused_naming_the_stage() {
    let cases: Vec<(Vec<StageShape>, &str)> = vec![
        (vec![], "the pipeline has no stages"),
        (vec![stage("a", &[]), stage("b", &["c"])], r#"stage "b" needs "c", which is not a stage of this pipeline"#),
        (vec![stage("a", &[]), stage("a", &[])], r#"stage "a" is defined twice"#),
        (vec![stage("a", &["a"])], r#"stage "a" needs itself"#),
        (vec![stage("a", &["c"]), stage("b", &["a"]), stage("c", &["b"]), stage("d", &[])], "stages form a cycle: "),
        (vec![stage("", &[])], "stage 0: a stage needs a name"),
        (vec![stage("a b", &[])], r#"stage "a b": a stage name is letters"#),
        (vec![with_matrix(stage("a", &[]), "lr", &[])], r#"stage "a": matrix key "lr" has no values"#),
        (vec![with_matrix(stage("a", &[]), "l r", &["1"])], r#"stage "a": matrix key "l r" is letters"#),
    ];
    for (stages, want) in cases {
        let err = pipeline::expand(&stages).expect_err(want).to_string();
        assert!(err.starts_with(want), "{err:?} should start with {want:?}");
    }
    // The cycle is named whole, in the direction work would flow.
    let err = pipeline::order(&[stage("a", &["c"]), stage("b", &["a"]), stage("c", &["b"])]).expect_err("cycle");
    assert_eq!(err, PipelineError::Cycle(vec!["a".into(), "b".into(), "c".into(), "a".into()]));
}

#[test]
fn a_matrix_fans_a_stage_out_and_its_dependants_need_every_instance() {
    let stages = vec![
        stage("prep", &[]),
        with_matrix(with_matrix(stage("train", &["prep"]), "lr", &["0.1", "0.01"]), "seed", &["1", "2", "3"]),
        stage("eval", &["train"]),
    ];
    let jobs = pipeline::expand(&stages).expect("expand");
    assert_eq!(jobs.len(), 1 + 6 + 1);
    let labels: Vec<String> = jobs.iter().map(|i| i.label(&stages[i.stage].name)).collect();
    assert_eq!(labels[0], "prep");
    assert_eq!(labels[1], "train[lr=0.1,seed=1]");
    assert_eq!(labels[6], "train[lr=0.01,seed=3]");
    assert_eq!(labels[7], "eval");
    assert!(jobs[1..7].iter().all(|i| i.needs == vec![0]));
    assert_eq!(jobs[7].needs, (1..7).collect::<Vec<_>>(), "eval needs all six trainings");
    let big = with_matrix(with_matrix(stage("x", &[]), "a", &["1"; 20]), "b", &["1"; 20]);
    assert!(matches!(pipeline::expand(&[big]), Err(PipelineError::MatrixTooLarge { count: 400, .. })));
}

#[test]
fn stages_are_ordered_after_what_they_need_in_the_order_written_otherwise() {
    let stages = vec![
        stage("report", &["eval", "export"]),
        stage("eval", &["train"]),
        stage("train", &[]),
        stage("export", &["train"]),
    ];
    let names: Vec<&str> =
        pipeline::order(&stages).expect("order").into_iter().map(|i| stages[i].name.as_str()).collect();
    assert_eq!(names, vec!["train", "eval", "export", "report"]);
}

#[test]
fn a_runs_state_follows_its_jobs() {
    use StageState::*;
    let table = [
        (vec![Waiting, Waiting], RunState::Pending),
        (vec![Succeeded, Waiting], RunState::Running),
        (vec![Running, Waiting], RunState::Running),
        (vec![Succeeded, Succeeded], RunState::Succeeded),
        (vec![Succeeded, Failed, Failed], RunState::Failed),
        (vec![Cancelled, Failed], RunState::Cancelled),
        (vec![Failed, Running], RunState::Running),
    ];
    for (jobs, want) in table {
        assert_eq!(pipeline::run_state(&jobs), want, "{jobs:?}");
    }
}

/// A random DAG: stage `i` may need any earlier stage; shuffled so that the
/// order written is not the order of the edges.
fn dag() -> impl Strategy<Value = Vec<StageShape>> {
    (2usize..9)
        .prop_flat_map(|n| {
            let edges = proptest::collection::vec(proptest::collection::vec(any::<bool>(), n), n);
            let fan = proptest::collection::vec(1usize..4, n);
            let keys = proptest::collection::vec(any::<u32>(), n);
            (Just(n), edges, fan, keys)
        })
        .prop_map(|(n, edges, fan, keys)| {
            let mut perm: Vec<usize> = (0..n).collect();
            perm.sort_by_key(|&i| keys[i]);
            let names: Vec<String> = (0..n).map(|i| format!("s{i}")).collect();
            let mut stages: Vec<StageShape> = (0..n)
                .map(|i| {
                    let needs = (0..i).filter(|&j| edges[i][j]).map(|j| names[j].clone()).collect();
                    let mut s = StageShape { name: names[i].clone(), needs, matrix: BTreeMap::new() };
                    if fan[i] > 1 {
                        s.matrix.insert("k".into(), (0..fan[i]).map(|v| v.to_string()).collect());
                    }
                    s
                })
                .collect();
            let mut shuffled = Vec::with_capacity(n);
            for &p in &perm {
                shuffled.push(stages[p].clone());
            }
            stages = shuffled;
            stages
        })
}

proptest! {
    #[test]
    fn every_stage_comes_after_what_it_needs(stages in dag()) {
        let jobs = pipeline::expand(&stages).expect("a DAG expands");
        for (i, job) in jobs.iter().enumerate() {
            prop_assert!(job.needs.iter().all(|&n| n < i), "job {i} needs a later one: {jobs:?}");
            let want: usize = stages[job.stage].needs.iter()
                .map(|n| jobs.iter().filter(|j| stages[j.stage].name == *n).count()).sum();
            prop_assert_eq!(job.needs.len(), want);
        }
    }

    #[test]
    fn a_back_edge_is_refused_as_a_cycle(stages in dag()) {
        // Make the first stage in work order need the last one that depends on it, if any.
        let order = pipeline::order(&stages).expect("a DAG");
        let first = order[0];
        let Some(&last) = order.iter().rev().find(|&&i| depends_on(&stages, i, first)) else { return Ok(()) };
        let mut cyclic = stages.clone();
        let name = stages[last].name.clone();
        cyclic[first].needs.push(name);
        let is_cycle = matches!(pipeline::order(&cyclic), Err(PipelineError::Cycle(_)));
        prop_assert!(is_cycle);
    }

    /// Stages as jobs, run by the scheduler with random outcomes and
    /// cancellations: nothing starts before what it needs succeeded, and
    /// nothing after a failure or a cancellation of what it needs.
    #[test]
    fn the_scheduler_starts_a_stage_only_after_what_it_needs_succeeded(
        stages in dag(),
        outcomes in proptest::collection::vec(0u8..10, 40),
    ) {
        let jobs = pipeline::expand(&stages).expect("a DAG");
        let mut c = Cluster::new("default").node("n", 4, "H100-80GB");
        // The cluster numbers jobs from 1, as the daemon numbers a run's jobs in a row.
        let ids: Vec<JobId> = (1..=jobs.len() as u64).map(JobId).collect();
        for inst in &jobs {
            submit(&mut c, inst, &ids);
        }
        let mut ended: BTreeMap<JobId, bool> = BTreeMap::new();
        let mut started: BTreeSet<JobId> = BTreeSet::new();
        let mut o = outcomes.iter().cycle();
        for step in 0..200i64 {
            let now = t(step * 10);
            let plan = c.plan(now);
            // The shell's part: a job that can never start fails.
            for (&id, reason) in plan.reasons().iter() {
                if matches!(reason, PendingReason::DependencyFailed { .. }) {
                    c.snap.remove_pending(id, false).expect("remove");
                    prop_assert!(ended.insert(id, false).is_none());
                }
            }
            for s in &plan.starts {
                let i = ids.iter().position(|x| *x == s.job).expect("a stage");
                for &n in &jobs[i].needs {
                    prop_assert_eq!(ended.get(&ids[n]), Some(&true), "job {} started before {} succeeded", s.job, ids[n]);
                }
                started.insert(s.job);
            }
            c.apply(&plan);
            // Every running job ends now: 0 fails, 1 is cancelled, the rest succeed.
            let running: Vec<JobId> = c.snap.running_jobs().map(|j| j.id).collect();
            for id in running {
                let ok = !matches!(o.next(), Some(0 | 1));
                c.snap.stop(id, now, StopOutcome::Finished { success: ok }).expect("stop");
                ended.insert(id, ok);
            }
            if ended.len() == ids.len() {
                break;
            }
        }
        prop_assert_eq!(ended.len(), ids.len(), "every stage ended");
        // A stage started exactly when everything it needs succeeded.
        for (i, inst) in jobs.iter().enumerate() {
            let ready = inst.needs.iter().all(|&n| ended.get(&ids[n]) == Some(&true));
            prop_assert_eq!(started.contains(&ids[i]), ready, "stage {}", i);
        }
    }
}

fn depends_on(stages: &[StageShape], from: usize, on: usize) -> bool {
    let mut stack = vec![from];
    let mut seen = BTreeSet::new();
    while let Some(i) = stack.pop() {
        if i == on && i != from {
            return true;
        }
        if !seen.insert(i) {
            continue;
        }
        for n in &stages[i].needs {
            if let Some(j) = stages.iter().position(|s| s.name == *n) {
                if j == on {
                    return true;
                }
                stack.push(j);
            }
        }
    }
    false
}

fn submit(c: &mut Cluster, inst: &Instance, ids: &[JobId]) {
    let j = inst.needs.iter().fold(job("u").gpus(1), |j, &n| j.after(ids[n]));
    c.submit(j);
}

#[test]
fn a_cancelled_stage_never_lets_its_dependant_start() {
    let mut c = Cluster::new("default").node("n", 2, "H100-80GB");
    let prep = c.submit(job("u").gpus(1));
    let train = c.submit(job("u").gpus(1).after(prep));
    // Cancelled while pending, as `gpool pipeline cancel` or `gpool cancel` does.
    c.snap.remove_pending(prep, false).expect("cancel");
    let plan = c.plan(Time::from_secs(1));
    assert!(plan.starts.is_empty(), "{plan:#?}");
    assert_eq!(plan.reason_of(train), Some(&PendingReason::DependencyFailed { on: prep, succeeded: false }));
}
