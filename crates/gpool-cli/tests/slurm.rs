//! Issue 42: a Slurm user's habits. A bare `-t` is minutes, and a batch
//! script's `#SBATCH` lines say what it needs, as sbatch reads them; the
//! job reads Slurm's variables.

mod common;

use std::time::Duration;

use common::*;

fn id_of(out: &str) -> u64 {
    serde_json::from_str::<serde_json::Value>(out).expect("json")["ids"][0].as_u64().expect("an id")
}

#[test]
fn a_bare_time_limit_is_minutes_as_in_sbatch() {
    let s = Scratch::new("slurm-time");
    let d = Daemon::start(&s.0.join("data"), "1xH100-80GB", &[]);
    let (ok, out, err) = d.cli(&["submit", "-t", "90", "-o", "json", "--", "true"]);
    assert!(ok, "{err}");
    let id = id_of(&out);
    let (ok, shown, err) = d.cli(&["show", &id.to_string()]);
    assert!(ok, "{err}");
    assert!(shown.contains("time limit       1h30m"), "{shown}");
    assert_eq!(d.job(id)["spec"]["timeLimit"], "90m");
}

#[test]
fn a_batch_script_runs_with_what_its_sbatch_lines_ask() {
    let s = Scratch::new("slurm-script");
    let d = Daemon::start(&s.0.join("data"), "4xH100-80GB", &[]);
    let script = s.0.join("bars.sbatch");
    std::fs::write(
        &script,
        "#!/bin/sh\n#SBATCH --gres=gpu:2\n#SBATCH --time=1-00:00:00\n#SBATCH --job-name=bars-sb\n\
         #SBATCH --mail-type=END\n\necho \"job=$SLURM_JOB_ID gpus=$SLURM_GPUS_ON_NODE cuda=$CUDA_VISIBLE_DEVICES args=$*\"\n",
    )
    .expect("the script");
    let path = script.display().to_string();
    let (ok, out, err) = d.cli(&["submit", &path, "-o", "json", "--", "one", "two"]);
    assert!(ok, "{err}");
    assert!(err.contains("--mail-type has no effect"), "said what it ignored: {err}");
    let id = id_of(&out);
    d.wait_ended(&[id], Duration::from_secs(60));
    let job = d.job(id);
    assert_eq!((job["state"].as_str(), job["name"].as_str()), (Some("succeeded"), Some("bars-sb")), "{job}");
    assert_eq!(job["spec"]["timeLimit"], "1-00:00:00");
    assert_eq!(job["replicas"][0]["gpus"].as_array().map(Vec::len), Some(2), "{job}");
    let (_, logs, err) = d.cli(&["logs", &id.to_string()]);
    let cuda = job["replicas"][0]["cuda_visible_devices"].as_str().unwrap_or("?");
    assert!(logs.contains(&format!("job={id} gpus=2 cuda={cuda} args=one two")), "{logs}{err}");
    let (ok, shown, _) = d.cli(&["show", &id.to_string()]);
    assert!(ok && shown.contains("time limit       24h"), "{shown}");
    // Flags win over the script's lines; what gpool cannot honour is refused before anything is submitted.
    let (ok, out, err) = d.cli(&["submit", &path, "--gpus", "1", "--name", "flag", "-o", "json"]);
    assert!(ok, "{err}");
    let job = d.job(id_of(&out));
    assert_eq!(job["name"], "flag");
    assert_eq!(job["spec"]["resources"]["gpool.io/gpu"].as_f64(), Some(1.0));
    std::fs::write(&script, "#!/bin/sh\n#SBATCH --output=slurm-%j.out\ntrue\n").expect("the script");
    let (ok, _, err) = d.cli(&["submit", &path]);
    assert!(!ok && err.contains("gpool logs"), "{err}");
}
