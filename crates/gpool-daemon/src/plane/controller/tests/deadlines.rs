//! Soft deadlines (issue 17) through the controller: a job that can no
//! longer make its deadline is reported once (an event, and `late` in its
//! view), and runs on.

use super::*;

#[test]
fn a_job_that_cannot_make_its_deadline_is_reported_once_and_runs_on() {
    let mut h = Setup::new().policy("fifo").local_gpus(1).build();
    let busy = h.submit("command: [x]\nresources: {nvidia.com/gpu: 1}\n");
    // Two hours of work due in one hour, waiting behind a running job.
    let deadline = api::time::rfc3339(T0 + 3_600_000);
    let id =
        h.submit(&format!("command: [y]\nresources: {{nvidia.com/gpu: 1}}\nestimate: 2h\ndeadline: '{deadline}'\n"));
    let j = h.job(id);
    let late = j.late.expect("reported at the first pass");
    assert!(late.contains("cannot make its deadline"), "{late}");
    let said = h.event_messages("deadline_at_risk");
    assert_eq!(said.len(), 1, "{said:?}");
    // Later passes say nothing more; the job still starts when the GPU frees.
    h.advance(Duration::from_secs(60));
    h.exit(key(busy, 1, 0), Some(0), None);
    assert!(h.event_messages("deadline_at_risk").is_empty());
    assert_eq!(h.state(id), api::JobState::Running);
    let spec: api::JobSpec = gpool_api::yaml::from_str("command: [z]\ndeadline: '2026-12-01T08:00'\n").expect("spec");
    let err = h.call(ADMIN, |reply| Call::Submit { specs: vec![spec], reply }).expect_err("no zone");
    assert!(err.message.contains("deadline") && err.message.contains("with its zone"), "{err:?}");
}
