//! Issue 41: an elastic job (`replicas: {min, max}`) through the
//! controller, on the manual clock: it starts with every replica that fits,
//! a higher class shrinks it (its replicas get their grace period, then it
//! restarts at the smaller size: never preempted whole), and it grows back
//! when the GPUs are idle again. Every incarnation's `WORLD_SIZE` is its size.

use super::*;

const ELASTIC: &str = "command: [train]\nresources: {nvidia.com/gpu: 1}\nreplicas: {min: 2, max: 8}\n\
                       priority: low\npreemptible: true\ngracePeriod: 30s\n";
const HIGH: &str = "command: [high]\nresources: {nvidia.com/gpu: 4}\npriority: high\n";

/// The started replicas of `job` and the `WORLD_SIZE` each was given.
fn world_sizes(starts: &[(ReplicaKey, Vec<(String, String)>)], job: u64) -> Vec<String> {
    starts.iter().filter(|(k, _)| k.job == job).map(|(_, e)| env(e, "WORLD_SIZE").unwrap_or("-").to_string()).collect()
}

#[test]
fn an_elastic_job_shrinks_for_a_higher_class_and_grows_back_when_it_ends() {
    let mut h = Setup::new().policy("default").build();
    let e = h.submit(ELASTIC);
    let starts = h.starts();
    assert_eq!(world_sizes(&starts, e), vec!["8"; 8], "all 8 fit: 8 replicas, WORLD_SIZE 8");
    let first = &starts[0].1;
    assert_eq!(env(first, "PET_NNODES"), Some("2:8"), "torchrun's --nnodes=MIN:MAX");
    assert_eq!(env(first, "PET_RDZV_ID"), Some(format!("gpool-{e}").as_str()));
    assert_eq!(h.job(e).running_replicas, 8);

    h.advance(Duration::from_secs(40));
    let high = h.submit(HIGH);
    let stops = signals(&h.orders());
    assert_eq!(stops.len(), 8, "restart mode: every replica checkpoints and stops: {stops:?}");
    let view = h.job(e);
    assert_eq!(view.state, api::JobState::Stopping);
    assert!(view.reason.as_deref().is_some_and(|r| r.contains("from 8 to 4 replicas")), "{:?}", view.reason);
    assert_eq!(h.state(high), api::JobState::Pending);

    for rank in 0..8 {
        h.exit(key(e, 1, rank), None, Some(15));
    }
    let starts = h.starts();
    assert_eq!(world_sizes(&starts, e), vec!["4"; 4], "restarted at 4 on what was held for it");
    assert_eq!(world_sizes(&starts, high).len(), 1);
    let view = h.job(e);
    assert_eq!((view.state, view.running_replicas, view.restarts), (api::JobState::Running, 4, 1));
    assert_eq!(view.resizes.len(), 1);
    assert!(view.resizes[0].why.contains(&format!("for job {high} (higher priority)")), "{:?}", view.resizes);
    assert!(h.event_messages("resized").iter().any(|m| m.contains("shrinks from 8 to 4")));

    h.advance(Duration::from_secs(10));
    h.exit(key(high, 1, 0), Some(0), None);
    assert_eq!(signals(&h.orders()).len(), 4, "it has run 50 s in all: it grows at once");
    for rank in 0..4 {
        h.exit(key(e, 2, rank), None, Some(15));
    }
    let starts = h.starts();
    assert_eq!(world_sizes(&starts, e), vec!["8"; 8], "back to 8");
    let view = h.job(e);
    assert_eq!((view.running_replicas, view.resizes.len()), (8, 2));
    assert_eq!((view.resizes[1].from, view.resizes[1].to, view.resizes[1].why.as_str()), (4, 8, "idle GPUs"));
    let scrape = h.call(ADMIN, |reply| Call::Metrics { reply }).expect("scrape");
    assert_eq!((scrape.resizes_total, scrape.preemptions_total), (2, 0), "two resizes, no preemption");
}

#[test]
fn an_elastic_spec_that_cannot_work_is_refused_with_what_to_write() {
    let mut h = Setup::new().build();
    for (yaml, says) in [
        ("command: [x]\nreplicas: {min: 4, max: 2}\n", "above max"),
        ("command: [x]\nreplicas: {min: 0, max: 2}\n", "from 1 to 1024"),
        (
            "command: [x]\nresources: {google.com/tpu: 4}\nreplicas: {min: 1, max: 2}\ntpuTopology: 2x2x2\n",
            "cannot be elastic",
        ),
    ] {
        let spec: Result<api::JobSpec, _> = gpool_api::yaml::from_str(yaml);
        let err = match spec {
            Err(e) => e.to_string(),
            Ok(spec) => {
                h.call(ADMIN, |reply| Call::Submit { specs: vec![spec], reply }).map(|_| ()).expect_err(yaml).message
            }
        };
        assert!(err.contains(says), "{yaml}: {err}");
    }
}
