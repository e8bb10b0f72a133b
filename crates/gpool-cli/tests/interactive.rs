//! Issue 42: interactive sessions, driven as a person would, from a
//! pseudo-terminal: `gpool run --pty` waits for resources and gives the job
//! a real terminal on the node (its window size, Ctrl-C, its exit status);
//! `~.` detaches, `gpool attach` rejoins and sees what it missed; a client
//! that vanishes ends the session after its grace, and the GPU is released.
//! Through `gpool up`'s own node and through a remote `gpool agent`.

mod common;

use std::time::Duration;

use common::fleet::Proc;
use common::term::Term;
use common::*;
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(60);

fn local(d: &Daemon) -> Vec<(&'static str, String)> {
    vec![("GPOOL_DATA_DIR", d.data.display().to_string())]
}

fn env<'a>(pairs: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    pairs.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

#[test]
fn a_pty_job_gets_a_real_terminal_with_this_ones_keys_window_and_status() {
    let s = Scratch::new("pty-terminal");
    let d = Daemon::start(&s.0.join("data"), "2xH100-80GB", &[]);
    let vars = local(&d);
    // The issue's own check.
    let mut t = Term::spawn(
        &["run", "--gpus", "1", "--pty", "--", "sh", "-c", "tty; echo gpus=$CUDA_VISIBLE_DEVICES; exit 7"],
        &env(&vars),
    );
    assert_eq!(t.exit(LIMIT), Some(7), "the job's exit code is the command's:\n{}", t.text());
    let screen = t.text();
    assert!(screen.contains("/dev/pts/"), "the job's standard input is a terminal:\n{screen}");
    let gpus = screen.lines().find_map(|l| l.trim().strip_prefix("gpus=")).expect("the GPUs line");
    assert!(gpus.len() == 1 && gpus.parse::<u32>().is_ok(), "one GPU: {gpus:?}\n{screen}");

    // This window's size, then its new one; Ctrl-C is the job's terminal's interrupt.
    let script = "stty size; trap 'echo resized; stty size' WINCH; trap 'stty size; echo interrupted; exit 3' INT; \
                  echo ready; while :; do sleep 0.1; done";
    let mut t = Term::spawn(&["run", "--gpus", "1", "--pty", "--", "sh", "-c", script], &env(&vars));
    t.expect("ready", LIMIT);
    assert!(t.text().contains("33 111"), "the job starts at this window's size:\n{}", t.text());
    t.resize(50, 160);
    // The new size reaches the job's terminal (its SIGWINCH trap says so), then the key.
    t.expect("resized", LIMIT);
    t.keys(b"\x03");
    assert_eq!(t.exit(LIMIT), Some(3), "{}", t.text());
    let screen = t.text();
    assert!(screen.contains("50 160") && screen.contains("interrupted"), "{screen}");
    // Its output is in its log too, and the session counts as any job.
    let id = screen.split("job ").nth(1).and_then(|r| r.split_whitespace().next()).expect("its id");
    let (ok, log, _) = d.cli(&["logs", id]);
    assert!(ok && log.contains("interrupted"), "{log}");
    let (code, out, _) = gpool(&["acct", "-o", "json"], &env(&vars));
    assert_eq!(code, Some(0));
    let rows: serde_json::Value = serde_json::from_str(&out).expect("json");
    let row = rows.as_array().and_then(|r| r.iter().find(|r| r["jobid"] == id)).expect("the session in acct");
    assert!(row["gpu_hours"].as_f64().is_some_and(|h| h > 0.0) && row["exit_code"] == "3:0", "{row}");
}

/// The job's process is forked and confined by the shim itself (issue 44):
/// a command that cannot start is said on the waiting terminal, with a
/// shell's exit code, and the GPU goes back.
#[test]
fn a_pty_job_whose_command_cannot_start_says_why_on_the_terminal() {
    let s = Scratch::new("pty-refused");
    let d = Daemon::start(&s.0.join("data"), "1xH100-80GB", &[]);
    let vars = local(&d);
    let mut t = Term::spawn(&["run", "--gpus", "1", "--pty", "--", "no-such-program-gpool"], &env(&vars));
    assert_eq!(t.exit(LIMIT), Some(127), "a shell's code for a command not found:\n{}", t.text());
    assert!(t.text().contains("cannot start \"no-such-program-gpool\""), "{}", t.text());
    let job = d.until("/api/v1/jobs/1", LIMIT, |j| j["state"] == "failed");
    assert!(job["reason"].as_str().is_some_and(|r| r.contains("No such file")), "{job}");
    let (ok, out, err) = d.cli(&["submit", "--gpus", "1", "-o", "json", "--", "true"]);
    assert!(ok, "{out}{err}");
    d.until("/api/v1/jobs/2", LIMIT, |j| j["state"] == "succeeded");
}

#[test]
fn detach_attach_and_a_vanished_client_end_the_session_after_its_grace() {
    let s = Scratch::new("pty-attach");
    let d = Daemon::start(&s.0.join("data"), "1xH100-80GB", &[]);
    let vars = local(&d);
    let script = "echo ready; while read x; do echo got=$x; [ \"$x\" = q ] && exit 5; done";
    let mut first = Term::spawn(&["run", "--gpus", "1", "--pty", "--", "sh", "-c", script], &env(&vars));
    first.expect("ready", LIMIT);
    first.keys(b"a\r");
    first.expect("got=a", LIMIT);
    first.keys(b"~.");
    assert_eq!(first.exit(LIMIT), Some(0), "detaching is not failing:\n{}", first.text());
    assert!(first.text().contains("detached from job 1"), "{}", first.text());
    let job = d.req("GET", "/api/v1/jobs/1", &d.token, None).1;
    assert_eq!(job["state"], "running", "a detached session goes on: {job}");

    // Another client joins, sees what it missed, and ends it.
    let mut second = Term::spawn(&["attach", "1"], &env(&vars));
    second.expect("got=a", LIMIT);
    // A third takes it over: the second is told and leaves, without taking it back.
    let mut third = Term::spawn(&["attach", "1"], &env(&vars));
    third.expect("got=a", LIMIT);
    assert_eq!(second.exit(LIMIT), Some(0), "{}", second.text());
    assert!(second.text().contains("another client attached to job 1"), "{}", second.text());
    third.keys(b"q\r");
    assert_eq!(third.exit(LIMIT), Some(5), "{}", third.text());

    // A batch job has no terminal: attach says what to do instead.
    let (ok, out, _) = d.cli(&["submit", "-o", "json", "--", "true"]);
    assert!(ok, "{out}");
    let (code, _, err) = gpool(&["attach", "2"], &env(&vars));
    assert_ne!(code, Some(0));
    assert!(err.contains("not interactive") && err.contains("gpool logs -f 2"), "{err}");

    // A client killed outright: after the grace with no client, the job is
    // hung up and its GPU goes to the next job.
    let long = "echo ready; sleep 600";
    let mut gone =
        Term::spawn(&["run", "--gpus", "1", "--pty", "--detach-grace", "5s", "--", "sh", "-c", long], &env(&vars));
    gone.expect("ready", LIMIT);
    let id = 3;
    gone.child.kill().expect("kill -9 the client");
    let _ = gone.child.wait();
    let (ok, out, err) = d.cli(&["submit", "--gpus", "1", "-o", "json", "--", "true"]);
    assert!(ok, "{err}");
    let next: u64 = serde_json::from_str::<serde_json::Value>(&out).expect("json")["ids"][0].as_u64().expect("id");
    let ended = d.until(&format!("/api/v1/jobs/{id}"), LIMIT, |j| j["state"] == "failed");
    assert!(
        ended["reason"].as_str().is_some_and(|r| r.contains("no terminal was attached for 5 s")),
        "the session's end says why: {ended}"
    );
    d.until(&format!("/api/v1/jobs/{next}"), LIMIT, |j| j["state"] == "succeeded");
    assert!(processes_of(&d.data, Some(id)).is_empty(), "nothing of the session is left");
}

#[test]
fn a_session_on_a_remote_agent_goes_through_the_control_plane() {
    let s = Scratch::new("pty-remote");
    let plane = Daemon::serve(&s.0.join("cp"), &[]);
    let (status, v) = plane.req("POST", "/api/v1/tokens", &plane.token, Some(&json!({"user": "*", "role": "node"})));
    assert_eq!(status, 201, "{v}");
    let token_file = s.0.join("node.token");
    std::fs::write(&token_file, v["token"].as_str().expect("token")).expect("token file");
    std::fs::set_permissions(&token_file, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
    let args: Vec<String> = [
        "agent",
        "--server",
        &plane.url,
        "--token-file",
        &token_file.display().to_string(),
        "--node-name",
        "far",
        "--simulate-gpus",
        "1xH100-80GB",
        "--data-dir",
        &s.0.join("far").display().to_string(),
    ]
    .iter()
    .map(|x| x.to_string())
    .collect();
    let _agent = Proc::spawn(&args, &s.0.join("far.log"));
    plane.until("/api/v1/nodes", LIMIT, |n| n.as_array().is_some_and(|n| n.iter().any(|x| x["state"] == "up")));
    let vars = [("GPOOL_SERVER", plane.url.as_str()), ("GPOOL_TOKEN", plane.token.as_str())];
    let script = "tty; echo node=$GPOOL_NODE; read x; echo got=$x; exit 4";
    let mut t = Term::spawn(&["run", "--gpus", "1", "--pty", "--", "sh", "-c", script], &vars);
    t.expect("node=far", LIMIT);
    t.keys(b"over the wire\r");
    assert_eq!(t.exit(LIMIT), Some(4), "{}", t.text());
    let screen = t.text();
    assert!(screen.contains("/dev/pts/") && screen.contains("got=over the wire"), "{screen}");
}

#[test]
fn an_interactive_jobs_exposed_port_is_served_by_the_proxy() {
    let s = Scratch::new("pty-expose");
    let d = Daemon::start(&s.0.join("data"), "1xH100-80GB", &["--proxy-listen", "127.0.0.1:0"]);
    let vars = local(&d);
    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
    let server = format!("{} replica-demo --port {port} --delay 0ms", devtools());
    let mut t = Term::spawn(&["run", "--pty", "--expose", &port.to_string(), "--", "sh", "-c", &server], &env(&vars));
    t.expect("listening on", LIMIT);
    let screen = t.text();
    let url = screen
        .lines()
        .find_map(|l| l.trim().strip_prefix("gpool: exposed at "))
        .unwrap_or_else(|| panic!("the exposed port's address:\n{screen}"))
        .to_string();
    assert!(url.ends_with(&format!("/job-1-{port}/")), "{url}");
    let http: ureq::Agent = ureq::Agent::config_builder().timeout_global(Some(Duration::from_secs(30))).build().into();
    let answer = http.get(format!("{url}health")).call().expect("the proxy forwards to the job");
    assert_eq!(answer.status(), 200);
    t.keys(b"\x03");
    assert_ne!(t.exit(LIMIT), Some(0), "Ctrl-C stops it: {}", t.text());
}

#[test]
fn a_session_rides_out_a_restart_of_the_daemon() {
    let s = Scratch::new("pty-restart");
    let data = s.0.join("data");
    let mut d = Daemon::start(&data, "1xH100-80GB", &[]);
    let vars = local(&d);
    let script = "echo ready; while read x; do echo got=$x; [ \"$x\" = q ] && exit 5; done";
    let mut t = Term::spawn(&["run", "--gpus", "1", "--pty", "--", "sh", "-c", script], &env(&vars));
    t.expect("ready", LIMIT);
    t.keys(b"one\r");
    t.expect("got=one", LIMIT);
    // kill -9 of the control plane and its agent: the shim keeps the job and its terminal.
    d.kill9();
    t.expect("was lost", LIMIT);
    let _d = Daemon::start(&data, "1xH100-80GB", &[]);
    t.expect("attached again to job 1", LIMIT);
    t.keys(b"two\r");
    t.expect("got=two", LIMIT);
    t.keys(b"q\r");
    assert_eq!(t.exit(LIMIT), Some(5), "the same job, to its end: {}", t.text());
}
