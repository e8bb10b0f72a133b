//! Pipeline runs (issue 17) through the controller: stages start after
//! what they need, with their run's variables; a failed or cancelled stage
//! stops its dependants and the run says so; malformed pipelines are
//! refused whole, naming the stage.

use api::pipeline::{PipelineSpec, PipelineView};

use super::*;
use crate::plane::controller::ListQuery;

const NIGHTLY: &str = "name: nightly
stages:
  - name: eval
    needs: [train]
    command: [eval]
  - name: prep
    command: [prep, --out, data]
    resources: {cpu: 1}
  - name: train
    needs: [prep]
    matrix: {lr: [0.1, 0.01]}
    command: [train, '--lr={{ matrix.lr }}']
    resources: {nvidia.com/gpu: 1}
  - name: report
    needs: [prep]
    command: [report]
";

fn pipeline(h: &mut Harness, yaml: &str) -> Result<api::pipeline::PipelineCreated, ApiError> {
    let spec: PipelineSpec = gpool_api::yaml::from_str(yaml).expect("a valid pipeline file");
    h.call(ADMIN, |reply| Call::SubmitPipeline { spec: Box::new(spec), reply })
}

fn view(h: &mut Harness, run: u64) -> PipelineView {
    h.call(ADMIN, |reply| Call::Pipeline { run, reply }).expect("the run")
}

fn env_of<'a>(env: &'a [(String, String)], k: &str) -> Option<&'a str> {
    env.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str())
}

fn started(h: &mut Harness) -> Vec<(u64, Vec<(String, String)>)> {
    h.starts().into_iter().map(|(k, env)| (k.job, env)).collect()
}

#[test]
fn stages_start_after_what_they_need_succeeded_with_their_runs_variables() {
    let mut h = Setup::new().policy("fifo").local_gpus(4).build();
    let created = pipeline(&mut h, NIGHTLY).expect("accepted");
    let run = created.run;
    // In the order work flows: prep, train ×2, eval, report.
    assert_eq!(created.jobs, (run..run + 5).collect::<Vec<_>>());
    let v = view(&mut h, run);
    let labels: Vec<&str> = v.stages.iter().map(|s| s.label.as_str()).collect();
    assert_eq!(labels, ["prep", "train[lr=0.1]", "train[lr=0.01]", "eval", "report"]);
    assert_eq!(v.stages.iter().map(|s| s.depth).collect::<Vec<_>>(), [0, 1, 1, 2, 1]);
    assert_eq!(v.state, "running", "prep started in the pass after the submission");
    let first = started(&mut h);
    assert_eq!(first.iter().map(|(j, _)| *j).collect::<Vec<_>>(), [run], "only prep runs first");
    let env = &first[0].1;
    assert_eq!(env_of(env, "GPOOL_PIPELINE_RUN"), Some(run.to_string().as_str()));
    assert_eq!(env_of(env, "GPOOL_STAGE"), Some("prep"));
    assert_eq!(env_of(env, "GPOOL_JOB_NAME"), Some("nightly.prep"));
    h.exit(key(run, 1, 0), Some(0), None);
    let next = started(&mut h);
    assert_eq!(next.iter().map(|(j, _)| *j).collect::<Vec<_>>(), [run + 1, run + 2, run + 4]);
    assert_eq!(env_of(&next[1].1, "GPOOL_MATRIX_LR"), Some("0.01"));
    let train = h.job(run + 1);
    assert_eq!(train.spec.command.argv(), ["train", "--lr=0.1"], "the matrix value is in its command");
    assert_eq!(train.name, "nightly.train[lr=0.1]");
    assert_eq!(view(&mut h, run).state, "running");
    h.exit(key(run + 1, 1, 0), Some(0), None);
    assert!(started(&mut h).is_empty(), "eval needs both trainings");
    h.exit(key(run + 2, 1, 0), Some(0), None);
    assert_eq!(started(&mut h).iter().map(|(j, _)| *j).collect::<Vec<_>>(), [run + 3]);
    h.exit(key(run + 3, 1, 0), Some(0), None);
    h.exit(key(run + 4, 1, 0), Some(0), None);
    assert_eq!(view(&mut h, run).state, "succeeded");
}

#[test]
fn a_failed_stage_fails_what_needs_it_and_the_run_while_other_branches_finish() {
    let mut h = Setup::new().policy("fifo").local_gpus(4).build();
    let run = pipeline(&mut h, NIGHTLY).expect("accepted").run;
    h.exit(key(run, 1, 0), Some(0), None);
    h.orders();
    h.exit(key(run + 1, 1, 0), Some(3), None);
    let eval = h.job(run + 3);
    assert_eq!(eval.state, api::JobState::Failed, "eval can never start: {eval:?}");
    assert!(eval.reason.as_deref().is_some_and(|r| r.contains("did not succeed")), "{eval:?}");
    assert_eq!(view(&mut h, run).state, "running", "the other training and the report still run");
    h.exit(key(run + 2, 1, 0), Some(0), None);
    h.exit(key(run + 4, 1, 0), Some(0), None);
    assert!(started(&mut h).is_empty(), "eval never started");
    let v = view(&mut h, run);
    assert_eq!(v.state, "failed");
    assert_eq!(v.stages.iter().filter(|s| s.state == api::JobState::Succeeded).count(), 3);
}

#[test]
fn cancelling_a_run_cancels_each_of_its_jobs_that_has_not_ended() {
    let mut h = Setup::new().policy("fifo").local_gpus(4).build();
    let run = pipeline(&mut h, NIGHTLY).expect("accepted").run;
    h.exit(key(run, 1, 0), Some(0), None);
    h.orders();
    let v = h.call(ADMIN, |reply| Call::CancelPipeline { run, from: "test".into(), reply }).expect("cancelled");
    // The waiting eval is cancelled at once; the running ones are being stopped.
    assert_eq!(v.stages[3].state, api::JobState::Cancelled);
    assert!(v.stages[1..3].iter().chain(&v.stages[4..]).all(|s| s.state == api::JobState::Stopping), "{v:#?}");
    for j in [run + 1, run + 2, run + 4] {
        h.exit(key(j, 1, 0), None, Some(15));
    }
    let v = view(&mut h, run);
    assert_eq!(v.state, "cancelled");
    assert_eq!(v.stages[0].state, api::JobState::Succeeded, "what had ended stays as it ended");
    let again = h.call(ADMIN, |reply| Call::CancelPipeline { run, from: "test".into(), reply });
    assert_eq!(again.expect_err("ended").status, 409);
}

#[test]
fn malformed_pipelines_are_refused_whole_naming_the_stage() {
    let mut h = Setup::new().policy("fifo").local_gpus(4).build();
    let cases = [
        (
            "stages:\n  - {name: a, command: [x], needs: [b]}\n  - {name: b, command: [x], needs: [a]}\n",
            "stages form a cycle: ",
        ),
        ("stages:\n  - {name: a, command: [x], needs: [prep]}\n", r#"stage "a" needs "prep", which is not a stage"#),
        (
            "stages:\n  - {name: a, command: [x]}\n  - {name: big, command: [x], needs: [a], resources: {nvidia.com/gpu: 64}}\n",
            r#"stage "big": rejected: "#,
        ),
        (
            "stages:\n  - {name: a, command: [x, '{{matrix.lr}}'], matrix: {seed: [1]}}\n",
            r#"stage "a[seed=1]": {{matrix.lr}}: its matrix has no key "lr" (its keys: seed)"#,
        ),
        ("kind: Job\nstages:\n  - {name: a, command: [x]}\n", "kind: \"Job\""),
    ];
    for (yaml, want) in cases {
        let err = pipeline(&mut h, yaml).expect_err(want);
        assert_eq!(err.status, 400, "{want}");
        assert!(err.message.starts_with(want), "{:?} should start with {want:?}", err.message);
    }
    assert!(started(&mut h).is_empty());
    let list = h.call(ADMIN, |reply| Call::List { query: ListQuery { limit: 100, ..Default::default() }, reply });
    assert!(list.expect("list").jobs.is_empty(), "nothing of a refused pipeline was submitted");
}

#[test]
fn a_run_is_found_by_its_id_only() {
    let mut h = Setup::new().policy("fifo").local_gpus(4).build();
    let plain = h.submit("command: [x]\n");
    let run = pipeline(&mut h, NIGHTLY).expect("accepted").run;
    let err = h.call(ADMIN, |reply| Call::Pipeline { run: plain, reply }).expect_err("not a run");
    assert_eq!((err.status, err.message.contains("not part of a pipeline")), (404, true), "{err:?}");
    let err = h.call(ADMIN, |reply| Call::Pipeline { run: run + 2, reply }).expect_err("a later stage");
    assert!(err.message.contains(&format!("of run {run}")), "{err:?}");
    let list = h.call(ADMIN, |reply| Call::Pipelines { limit: 10, reply }).expect("list");
    assert_eq!(list.runs.iter().map(|r| r.run).collect::<Vec<_>>(), [run]);
}
