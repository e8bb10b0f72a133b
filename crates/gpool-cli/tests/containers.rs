//! Jobs in OCI images, end to end: `gpool up` runs them with the real
//! podman (installed by scripts/test.sh) from a small image the test
//! imports itself (busybox-static in an otherwise empty root file system:
//! no registry, no internet).

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::image::Image;
use common::*;
use serde_json::json;

fn containers_of(job: u64) -> Vec<String> {
    let out = Command::new("podman")
        .args(["ps", "-a", "--filter", &format!("label=gpool.job={job}"), "--format", "{{.Names}}"])
        .output()
        .expect("podman ps");
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).filter(|l| !l.is_empty()).collect()
}

/// One test, so that the two daemons never run at once: job ids (and so the
/// `gpool.job` labels the checks look for) repeat between daemons.
#[test]
fn container_jobs_end_to_end() {
    jobs_run_in_their_image_end_with_its_exit_code_and_leave_no_container();
    after_a_kill_9_of_the_daemon_its_container_jobs_go_on_and_none_is_orphaned();
    the_image_cache_keeps_to_its_size_by_removing_the_least_recently_used_image();
    an_image_not_here_is_pulled_before_the_command_and_a_failed_pull_fails_the_job();
    a_preemptor_s_image_is_pulled_while_its_victim_checkpoints();
}

fn a_preemptor_s_image_is_pulled_while_its_victim_checkpoints() {
    let s = Scratch::new("containers-ahead");
    let image = Image::build_with(&s, "ahead", 0);
    let archive = s.0.join("image.tar");
    let out = Command::new("podman").args(["save", "-o"]).arg(&archive).arg(&image.0).output().expect("podman save");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(Command::new("podman").args(["rmi", &image.0]).output().expect("rmi").status.success());
    assert!(!image_exists(&image.0));
    let d = Daemon::start(
        &s.0.join("data"),
        "1xH100-80GB",
        &[
            "--container-arg=--runtime=runc",
            "--container-arg=--ulimit=nofile=1024:1024",
            "--container-arg=--ulimit=nproc=1024:1024",
        ],
    );
    // A preemptible job that takes 20 s to checkpoint once told to stop: the GPU is not free before.
    // "running" comes before its shell has set the trap: a stop signal then kills it at once (the
    // flaky failure this phase had), so the preemptor comes only once the trap is set.
    let trapped = s.0.join("trapped");
    let line = format!("trap 'sleep 20; exit 0' TERM; touch {}; sleep 600 & wait", trapped.display());
    let low = d.submit(json!({"command": ["sh", "-c", line],
        "resources": {"nvidia.com/gpu": 1}, "preemptible": true, "priority": "low", "gracePeriod": "30s"}));
    d.until(&format!("/api/v1/jobs/{low}"), Duration::from_secs(30), |j| j["state"] == "running");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !trapped.exists() {
        assert!(Instant::now() < deadline, "the victim never set its trap");
        std::thread::sleep(Duration::from_millis(50));
    }
    let high = d.submit(json!({"command": ["cat", "/IMAGE"], "image": format!("docker-archive:{}", archive.display()),
        "resources": {"nvidia.com/gpu": 1}, "priority": "high"}));
    // The image arrives on the node while the victim checkpoints and the job still waits for its GPU.
    d.until(&format!("/api/v1/jobs/{low}"), Duration::from_secs(30), |j| j["state"] == "stopping");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !image_exists(&image.0) {
        assert!(Instant::now() < deadline, "the image was never pulled ahead");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (victim, job) = (d.job(low), d.job(high));
    assert_eq!(
        (victim["state"].as_str(), job["state"].as_str()),
        (Some("stopping"), Some("pending")),
        "pulled while the victim checkpointed and the job waited: {victim} {job}"
    );
    d.wait_ended(&[high], Duration::from_secs(60));
    assert_eq!(d.job(high)["state"], "succeeded", "{}", d.job(high));
}

fn an_image_not_here_is_pulled_before_the_command_and_a_failed_pull_fails_the_job() {
    let s = Scratch::new("containers-pull");
    let image = Image::build_with(&s, "pull", 0);
    // A registry-free source: an archive of the image (`podman save`), pulled through the docker-archive transport.
    let archive = s.0.join("image.tar");
    let out = Command::new("podman").args(["save", "-o"]).arg(&archive).arg(&image.0).output().expect("podman save");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let d = Daemon::start(
        &s.0.join("data"),
        "1xH100-80GB",
        &[
            "--container-arg=--runtime=runc",
            "--container-arg=--ulimit=nofile=1024:1024",
            "--container-arg=--ulimit=nproc=1024:1024",
        ],
    );
    let source = format!("docker-archive:{}", archive.display());
    let (code, out, err) = d.cli_code(&["submit", "--image", &source, "--wait", "--", "cat", "/IMAGE"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let id = out.lines().next().unwrap_or("").trim().to_string();
    let (_, out, err) = d.cli(&["logs", &id]);
    let logs = format!("{out}{err}");
    assert!(logs.contains(&format!("== gpool: pulling {source}")) && logs.contains("Copying blob"), "{logs}");
    assert!(logs.contains("inside the image"), "then the command ran in it: {logs}");
    // A source that is not there: the job fails within seconds with the runtime's words.
    let t0 = Instant::now();
    let id = d.submit(json!({"command": ["true"], "image": format!("docker-archive:{}/missing.tar", s.0.display())}));
    d.wait_ended(&[id], Duration::from_secs(30));
    assert!(t0.elapsed() < Duration::from_secs(30));
    let job = d.job(id);
    assert_eq!(job["state"], "failed", "{job}");
    let (_, out, err) = d.cli(&["logs", &id.to_string()]);
    let text = format!("{job} {out}{err}");
    assert!(text.contains("missing.tar"), "the runtime's own message: {text}");
}

fn image_exists(name: &str) -> bool {
    Command::new("podman").args(["image", "exists", name]).status().expect("podman").success()
}

fn the_image_cache_keeps_to_its_size_by_removing_the_least_recently_used_image() {
    let s = Scratch::new("containers-cache");
    // Three images of about 4.5 MiB each (busybox and 3 MiB of random data); room for two.
    let images: Vec<Image> = ["c1", "c2", "c3"].iter().map(|t| Image::build_with(&s, t, 3 << 20)).collect();
    let d = Daemon::start(
        &s.0.join("data"),
        "1xH100-80GB",
        &[
            "--container-arg=--runtime=runc",
            "--container-arg=--ulimit=nofile=1024:1024",
            "--container-arg=--ulimit=nproc=1024:1024",
            "--image-cache-size",
            "10Mi",
        ],
    );
    for image in &images {
        let (code, out, err) =
            d.cli_code(&["submit", "--gpus", "1", "--image", &image.0, "--wait", "--", "sh", "-c", "exit 0"]);
        assert_eq!(code, Some(0), "{out}{err}");
    }
    // The first, least recently used, goes; the latest two stay.
    let deadline = Instant::now() + Duration::from_secs(30);
    while image_exists(&images[0].0) {
        assert!(Instant::now() < deadline, "the least recently used image was never removed");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(image_exists(&images[1].0) && image_exists(&images[2].0), "the two most recent images stay");
}

fn jobs_run_in_their_image_end_with_its_exit_code_and_leave_no_container() {
    let s = Scratch::new("containers");
    let image = Image::build(&s);
    // These machines refuse podman's default resource limits and crun (docs/containers.md).
    let d = Daemon::start(
        &s.0.join("data"),
        "1xH100-80GB",
        &[
            "--container-arg=--runtime=runc",
            "--container-arg=--ulimit=nofile=1024:1024",
            "--container-arg=--ulimit=nproc=1024:1024",
        ],
    );
    let (ok, nodes, _) = d.cli(&["nodes"]);
    assert!(ok && nodes.contains("images by podman"), "the node shows its runtime: {nodes}");
    let script = "cat /IMAGE; test -e /usr && echo host files visible; echo gpus=$CUDA_VISIBLE_DEVICES job=$GPOOL_JOB_ID; exit 3";
    let (code, out, err) =
        d.cli_code(&["submit", "--gpus", "1", "--image", &image.0, "--wait", "--", "sh", "-c", script]);
    assert_eq!(code, Some(3), "the job's exit code is the container's: {out}{err}");
    let id: u64 = out.lines().next().and_then(|l| l.trim().parse().ok()).expect("the job id");
    let (_, out, err) = d.cli(&["logs", &id.to_string()]);
    let logs = format!("{out}{err}");
    assert!(logs.contains("inside the image"), "it sees the image's files: {logs}");
    assert!(!logs.contains("host files visible"), "and not the host's: {logs}");
    assert!(logs.contains(&format!("gpus=0 job={id}")), "its GPU and identity are in its environment: {logs}");
    assert!(containers_of(id).is_empty(), "{:?}", containers_of(id));

    // Cancelled while running (sh as PID 1 ignores the stop signal): killed after the grace, container removed.
    let id = d.submit(json!({"command": ["sh", "-c", "sleep 600"], "image": image.0, "gracePeriod": "1s",
        "resources": {"nvidia.com/gpu": 1}}));
    d.until(&format!("/api/v1/jobs/{id}"), Duration::from_secs(30), |j| j["state"] == "running");
    let deadline = Instant::now() + Duration::from_secs(30);
    while containers_of(id).is_empty() {
        assert!(Instant::now() < deadline, "its container never appeared");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (ok, _, err) = d.cli(&["cancel", &id.to_string()]);
    assert!(ok, "{err}");
    d.wait_ended(&[id], Duration::from_secs(30));
    assert_eq!(d.job(id)["state"], "cancelled");
    assert!(containers_of(id).is_empty(), "no container with its label is left: {:?}", containers_of(id));

    // A missing image fails its job within seconds, with the runtime's own words in its log.
    let t0 = Instant::now();
    let id = d.submit(json!({"command": ["true"], "image": "localhost/gpool-missing-image:1"}));
    d.wait_ended(&[id], Duration::from_secs(30));
    assert!(t0.elapsed() < Duration::from_secs(30));
    let job = d.job(id);
    assert_eq!(job["state"], "failed", "{job}");
    assert!(
        job["reason"].as_str().is_some_and(|r| r.contains("could not run image localhost/gpool-missing-image:1")),
        "{job}"
    );
    let (_, out, err) = d.cli(&["logs", &id.to_string()]);
    let logs = format!("{out}{err}");
    assert!(logs.contains("localhost/gpool-missing-image"), "{logs}");
    // A bad image reference is refused at submission, naming the field.
    let (code, v) = d.req("POST", "/api/v1/jobs", &d.token, Some(&json!({"command": ["true"], "image": "bad image"})));
    assert!(code == 400 && v.to_string().contains("image"), "{v}");

    // An interactive job in its image: the runtime relays the job's terminal into the container.
    let vars = [("GPOOL_SERVER", d.url.as_str()), ("GPOOL_TOKEN", d.token.as_str())];
    let script = "cat /IMAGE; tty; read x; echo got=$x; exit 6";
    let mut t = common::term::Term::spawn(&["run", "--pty", "--image", &image.0, "--", "sh", "-c", script], &vars);
    t.expect("inside the image", Duration::from_secs(60));
    t.keys(b"typed in\r");
    assert_eq!(t.exit(Duration::from_secs(60)), Some(6), "{}", t.text());
    let screen = t.text();
    assert!(screen.contains("/dev/pts/") && screen.contains("got=typed in"), "{screen}");
}

fn after_a_kill_9_of_the_daemon_its_container_jobs_go_on_and_none_is_orphaned() {
    let s = Scratch::new("containers-restart");
    let image = Image::build(&s);
    let data = s.0.join("data");
    let args = [
        "--container-arg=--runtime=runc",
        "--container-arg=--ulimit=nofile=1024:1024",
        "--container-arg=--ulimit=nproc=1024:1024",
    ];
    let mut d = Daemon::start(&data, "5xH100-80GB", &args);
    let ids: Vec<u64> = (0..5)
        .map(|_| {
            d.submit(json!({"command": ["sh", "-c", "trap 'exit 0' TERM; sleep 600 & wait"], "image": image.0,
                "resources": {"nvidia.com/gpu": 1}, "gracePeriod": "2s"}))
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while ids.iter().any(|id| containers_of(*id).is_empty()) {
        assert!(Instant::now() < deadline, "the containers never all appeared");
        std::thread::sleep(Duration::from_millis(100));
    }
    let before: Vec<Vec<String>> = ids.iter().map(|id| containers_of(*id)).collect();
    d.kill9();
    let d = Daemon::start(&data, "5xH100-80GB", &args);
    // Each job goes on: its shim and its very container were adopted, on the same attempt, never restarted.
    for (id, before) in ids.iter().zip(&before) {
        let j = d.until(&format!("/api/v1/jobs/{id}"), Duration::from_secs(30), |j| j["state"] != "starting");
        assert_eq!(j["state"], "running", "job {id} was adopted: {j}");
        assert_eq!((j["attempt"].as_u64(), j["restarts"].as_u64()), (Some(1), Some(0)), "job {id}: {j}");
        assert_eq!(&containers_of(*id), before, "job {id} runs in the same container");
    }
    for id in &ids {
        let (ok, _, err) = d.cli(&["cancel", &id.to_string()]);
        assert!(ok, "{err}");
    }
    d.wait_ended(&ids, Duration::from_secs(60));
    for id in &ids {
        assert!(containers_of(*id).is_empty(), "job {id}: {:?}", containers_of(*id));
    }
}
