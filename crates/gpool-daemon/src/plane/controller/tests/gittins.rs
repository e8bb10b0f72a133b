//! `--policy-set within_level=gittins` through the controller: a job gets
//! the run times of jobs like it at submission, keeps them across a
//! restart, and the order reads them.

use super::restore::StateFile;
use super::*;

fn spec(name: &str) -> String {
    format!("name: {name}\ncommand: [x]\nresources: {{nvidia.com/gpu: 8}}\n")
}

#[test]
fn a_job_whose_like_jobs_ended_in_a_minute_overtakes_one_whose_ran_for_hours_after_a_restart() {
    let state = StateFile::new("gittins");
    let clock = ManualClock::new(T0);
    let setup = || Setup::new().store(state.open()).clock(clock.clone()).policy_set("within_level=gittins");
    let (blocker, long, quick) = {
        let mut h = setup().build();
        for (name, secs) in [("quick", 60), ("long", 7_200), ("quick", 60), ("long", 7_200)] {
            let id = h.submit(&spec(name));
            assert_eq!(h.state(id), api::JobState::Running);
            h.advance(Duration::from_secs(secs));
            h.exit(key(id, 1, 0), Some(0), None);
            assert_eq!(h.state(id), api::JobState::Succeeded);
        }
        let blocker = h.submit(&spec("other"));
        let long = h.submit(&spec("long"));
        h.advance(Duration::from_secs(1));
        let quick = h.submit(&spec("quick"));
        (blocker, long, quick)
    };
    clock.advance(Duration::from_secs(5));
    let mut h = setup().build();
    assert_eq!(h.state(blocker), api::JobState::Running);
    h.exit(key(blocker, 1, 0), Some(0), None);
    assert_eq!(h.state(quick), api::JobState::Running, "{:?}", h.job(quick).reason);
    assert_eq!(h.state(long), api::JobState::Pending);
}

#[test]
fn without_the_index_the_first_submitted_goes_first() {
    let mut h = Setup::new().build();
    for (name, secs) in [("quick", 60), ("long", 7_200), ("quick", 60), ("long", 7_200)] {
        let id = h.submit(&spec(name));
        h.advance(Duration::from_secs(secs));
        h.exit(key(id, 1, 0), Some(0), None);
    }
    let blocker = h.submit(&spec("other"));
    let long = h.submit(&spec("long"));
    h.advance(Duration::from_secs(1));
    let quick = h.submit(&spec("quick"));
    h.exit(key(blocker, 1, 0), Some(0), None);
    assert_eq!(h.state(long), api::JobState::Running);
    assert_eq!(h.state(quick), api::JobState::Pending);
}
