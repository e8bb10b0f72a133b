//! The idle rule's transitions taken into each job's idle GPUs (`idle.rs`):
//! a warning once all of a job's GPUs idle, a stop where its queue says so,
//! nothing for a job the rule no longer fires on.

use gpool_core::Time;
use gpool_core::alert::{Severity, Transition};

use super::super::acts::Act;
use super::super::idle::{IDLE_RULE, IdleGpus, OPT_OUT};
use super::*;

fn transition(job: u64, gpu: &str, firing: bool) -> Transition {
    Transition {
        rule: IDLE_RULE.into(),
        severity: Severity::Warning,
        subject: gpu.into(),
        firing,
        value: 0.0,
        since: Time::from_millis(T0),
        labels: vec![("job_id".into(), job.to_string())],
        summary: format!("{gpu} idle"),
    }
}

/// What the acts say, in order: ("stop", job) or (event kind, job).
fn said(acts: &[Act]) -> Vec<(String, u64)> {
    acts.iter()
        .map(|a| match a {
            Act::Stop { job, why } => (format!("stop {why:?}"), *job),
            Act::Event { job, kind, .. } => (kind.to_string(), job.unwrap_or(0)),
            other => (format!("{other:?}"), 0),
        })
        .collect()
}

#[test]
fn a_job_is_warned_once_every_one_of_its_gpus_idles() {
    let mut h = Setup::new().policy("fifo").local_gpus(4).build();
    let id = h.submit("command: [x]\nresources: {nvidia.com/gpu: 2}\n");
    assert_eq!(h.state(id), api::JobState::Running);
    let mut idle = IdleGpus::default();
    let acts = idle.on_transitions(&[transition(id, "n1/gpu0", true)], &h.ctl.snap, &h.ctl.jobs);
    assert!(acts.0.is_empty(), "one of two GPUs idle says nothing: {:?}", acts.0);
    let acts = idle.on_transitions(&[transition(id, "n1/gpu1", true)], &h.ctl.snap, &h.ctl.jobs);
    assert_eq!(said(&acts.0), [("idle_warning".to_string(), id)]);
    // A GPU busy again, then idle again: warned again only once both are idle.
    let acts = idle.on_transitions(&[transition(id, "n1/gpu1", false)], &h.ctl.snap, &h.ctl.jobs);
    assert!(acts.0.is_empty(), "{:?}", acts.0);
    // Another rule's transitions are not idleness.
    let mut other = transition(id, "n1/gpu1", true);
    other.rule = "GpuHot".into();
    assert!(idle.on_transitions(&[other], &h.ctl.snap, &h.ctl.jobs).0.is_empty());
}

#[test]
fn a_queue_that_stops_idle_jobs_stops_them_unless_they_opt_out() {
    let mut h = Setup::new().policy("fifo").queues(&["default"]).local_gpus(4).build();
    let mut q = h.ctl.snap.queues().find(|q| &*q.name == "default").cloned().expect("the queue");
    q.idle_stop = true;
    h.ctl.snap.set_queue(q);
    let stopped = h.submit("command: [x]\nresources: {nvidia.com/gpu: 1}\n");
    let kept = h
        .submit(&format!("command: [x]\nresources: {{nvidia.com/gpu: 1}}\nlabels: {{{}: {}}}\n", OPT_OUT.0, OPT_OUT.1));
    let mut idle = IdleGpus::default();
    let t = [transition(stopped, "n1/gpu0", true), transition(kept, "n1/gpu1", true)];
    let acts = idle.on_transitions(&t, &h.ctl.snap, &h.ctl.jobs);
    let got = said(&acts.0);
    assert_eq!(
        got,
        [
            ("idle_stop".to_string(), stopped),
            ("stop Idle { gpus: 1 }".to_string(), stopped),
            ("idle_warning".to_string(), kept)
        ],
        "{:?}",
        acts.0
    );
    let warned = acts.0.iter().find_map(|a| match a {
        Act::Event { job: Some(j), message, .. } if *j == kept => Some(message.clone()),
        _ => None,
    });
    assert!(warned.as_deref().is_some_and(|m| m.contains("opted out")), "{warned:?}");
}

#[test]
fn a_job_that_no_longer_runs_is_forgotten() {
    let mut h = Setup::new().policy("fifo").local_gpus(2).build();
    let id = h.submit("command: [x]\nresources: {nvidia.com/gpu: 1}\n");
    h.exit(key(id, 1, 0), Some(0), None);
    assert_eq!(h.state(id), api::JobState::Succeeded);
    let mut idle = IdleGpus::default();
    let acts = idle.on_transitions(&[transition(id, "n1/gpu0", true)], &h.ctl.snap, &h.ctl.jobs);
    assert!(acts.0.is_empty(), "{:?}", acts.0);
}
