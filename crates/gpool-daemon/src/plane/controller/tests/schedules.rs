//! Recurring jobs and pipelines (issue 17) through the controller: a
//! schedule submits at its occurrence to the millisecond, as its owner;
//! passes an occurrence while its previous run goes on; and refuses what it
//! could never run.

use api::schedule::{ScheduleSpec, ScheduleView};

use super::*;

/// 2023-11-15T02:00:00Z, the first 02:00 UTC after T0 (2023-11-14T22:13:20Z).
const TWO_AM: i64 = 1_700_013_600_000;

fn apply(h: &mut Harness, name: &str, yaml: &str) -> Result<ScheduleView, ApiError> {
    let spec: ScheduleSpec = gpool_api::yaml::from_str(yaml).expect("a valid schedule file");
    h.call(ADMIN, |reply| Call::ApplySchedule { name: name.into(), spec: Box::new(spec), reply })
}

fn list(h: &mut Harness) -> Vec<ScheduleView> {
    h.call(ADMIN, |reply| Call::Schedules { reply }).expect("list")
}

#[test]
fn a_schedule_submits_its_job_at_each_occurrence_to_the_millisecond() {
    let mut h = Setup::new().policy("fifo").build();
    let v =
        apply(&mut h, "nightly", "schedule: '0 2 * * *'\ntimeZone: UTC\njob: {command: [train]}\n").expect("applied");
    assert_eq!(v.next_at, Some(api::time::rfc3339(TWO_AM)));
    h.clock.set(TWO_AM - 1);
    h.step(Vec::new());
    assert!(h.starts().is_empty(), "not a millisecond early");
    h.clock.set(TWO_AM);
    h.step(Vec::new());
    let started = h.starts();
    assert_eq!(started.len(), 1);
    let job = h.job(started[0].0.job);
    assert_eq!(
        (job.user.as_str(), job.spec.labels.get("gpool.io/schedule").map(String::as_str)),
        ("root", Some("nightly"))
    );
    h.exit(started[0].0, Some(0), None);
    // Nothing more the same day; one more the next.
    h.advance(Duration::from_secs(3600));
    assert!(h.starts().is_empty());
    h.clock.set(TWO_AM + 86_400_000);
    h.step(Vec::new());
    assert_eq!(h.starts().len(), 1);
    let v = &list(&mut h)[0];
    assert_eq!((v.runs, v.skipped), (2, 0));
    assert_eq!(v.last_at, Some(api::time::rfc3339(TWO_AM + 86_400_000)));
}

#[test]
fn an_occurrence_passes_while_the_previous_run_goes_on_unless_overlap_is_allowed() {
    let mut h = Setup::new().policy("fifo").build();
    apply(&mut h, "hourly", "schedule: '@hourly'\ntimeZone: UTC\njob: {command: [long]}\n").expect("applied");
    apply(&mut h, "overlap", "schedule: '@hourly'\ntimeZone: UTC\nconcurrency: allow\njob: {command: [long]}\n")
        .expect("applied");
    let first_hour = T0 - T0 % 3_600_000 + 3_600_000;
    h.clock.set(first_hour);
    h.step(Vec::new());
    assert_eq!(h.starts().len(), 2, "each starts its first run");
    h.clock.set(first_hour + 3_600_000);
    h.step(Vec::new());
    assert_eq!(h.starts().len(), 1, "only the one that allows overlap starts another");
    let views = list(&mut h);
    let hourly = views.iter().find(|v| v.name == "hourly").expect("hourly");
    assert_eq!((hourly.runs, hourly.skipped), (1, 1));
    let messages = h.event_messages("schedule");
    assert!(messages.iter().any(|m| m.contains("has not ended (concurrency: forbid)")), "{messages:?}");
}

#[test]
fn schedules_that_could_never_run_are_refused_saying_why() {
    let mut h = Setup::new().policy("fifo").build();
    let cases = [
        ("schedule: '0 25 * * *'\ntimeZone: UTC\njob: {command: [x]}\n", "schedule: hour field \"25\""),
        (
            "schedule: '0 2 * * *'\ntimeZone: Mars/Olympus\njob: {command: [x]}\n",
            "timeZone: \"Mars/Olympus\" is not a time zone",
        ),
        ("schedule: '0 2 * * *'\ntimeZone: UTC\n", "a schedule submits a job (job:) or a pipeline"),
        (
            "schedule: '0 2 * * *'\ntimeZone: UTC\nconcurrency: replace\njob: {command: [x]}\n",
            "concurrency: \"replace\"",
        ),
        (
            "schedule: '0 2 * * *'\ntimeZone: UTC\njob: {command: [x], resources: {nvidia.com/gpu: 64}}\n",
            "job: rejected: ",
        ),
        (
            "schedule: '0 2 * * *'\ntimeZone: UTC\npipeline: {stages: [{name: a, command: [x], needs: [z]}]}\n",
            "pipeline: stage \"a\" needs \"z\"",
        ),
    ];
    for (yaml, want) in cases {
        let err = apply(&mut h, "s", yaml).expect_err(want);
        assert_eq!(err.status, 400, "{want}");
        assert!(err.message.starts_with(want), "{:?} should start with {want:?}", err.message);
    }
    assert!(list(&mut h).is_empty());
    let err = apply(&mut h, "bad name", "schedule: '@daily'\ntimeZone: UTC\njob: {command: [x]}\n").expect_err("name");
    assert!(err.message.contains("a schedule's name"), "{err:?}");
}
