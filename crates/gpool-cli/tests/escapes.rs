//! Issue 46: no user becomes root or reaches what is not theirs. Each test
//! attacks `gpool up` running as root (jobs run as their users) the way an
//! ordinary user with a token and a Unix account on the node would:
//! through the job's environment, a setuid program in their own image,
//! image names that are paths, a link planted in a shared checkpoint root,
//! and a request body that would keep the API's workers busy.

mod common;

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::image::Image;
use common::{Daemon, Scratch, User};
use serde_json::json;

fn submit_as(d: &Daemon, token: &str, spec: serde_json::Value) -> u64 {
    let (s, v) = d.req("POST", "/api/v1/jobs", token, Some(&spec));
    assert_eq!(s, 201, "{spec}: {v}");
    v["ids"][0].as_u64().expect("id")
}

fn log(d: &Daemon, job: u64) -> String {
    std::fs::read_to_string(d.data.join(format!("jobs/{job}/rank0.out"))).unwrap_or_default()
}

/// Writes `content` at `path` as `user`'s file with `mode`.
fn give(path: &Path, content: &[u8], user: &User, mode: u32) {
    std::fs::write(path, content).expect("write");
    std::os::unix::fs::chown(path, Some(user.uid), None).expect("chown");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// Compiles C `source` with the system's compiler (`extra`: its flags).
fn cc(dir: &Path, name: &str, source: &str, extra: &[&str]) -> PathBuf {
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, source).expect("source");
    let out_path = dir.join(name);
    let out = Command::new("cc").args(extra).arg("-o").arg(&out_path).arg(&c).output().expect("cc is installed");
    assert!(out.status.success(), "cc {name}: {}", String::from_utf8_lossy(&out.stderr));
    out_path
}

/// A job sets `PATH` to a directory holding its own `sh`, and `LD_PRELOAD`
/// to its own library; both record the uid they run as. They run, as the
/// user, and never as root: the shim's root side runs nothing with the
/// job's environment. A bare job has no capability and no way to gain
/// privileges (`NoNewPrivs`), and a three-stage pipeline passes files on
/// when its stages run as their user.
#[test]
fn the_jobs_environment_never_reaches_root_and_its_user_gains_no_privilege() {
    let s = Scratch::new("escapes-env");
    let tag = std::process::id() % 100_000;
    let alice = User::create(&format!("gpe{tag}"));
    let records = s.0.join("records");
    std::fs::create_dir_all(&records).expect("records");
    std::fs::set_permissions(&records, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    std::fs::set_permissions(&s.0, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let record = records.join("uids");
    let home = PathBuf::from(format!("/home/{}", alice.name));
    let bin = home.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    std::os::unix::fs::chown(&bin, Some(alice.uid), None).expect("chown");
    give(
        &bin.join("sh"),
        format!("#!/bin/dash\necho \"sh $(/usr/bin/id -u)\" >> {}\nexec /bin/dash \"$@\"\n", record.display())
            .as_bytes(),
        &alice,
        0o755,
    );
    let lib = cc(
        &s.0,
        "record.so",
        &format!(
            "#include <stdio.h>\n#include <unistd.h>\n__attribute__((constructor)) static void record(void) {{\n\
             FILE *f = fopen(\"{}\", \"a\"); if (f) {{ fprintf(f, \"preload %d\\n\", (int)getuid()); fclose(f); }} }}\n",
            record.display()
        ),
        &["-shared", "-fPIC"],
    );
    let preload = home.join("record.so");
    std::fs::copy(&lib, &preload).expect("copy");
    std::os::unix::fs::chown(&preload, Some(alice.uid), None).expect("chown");

    let d = Daemon::start(&s.0.join("data"), "2xH100-80GB", &["--run-as", "user"]);
    let token = d.token_for(&alice.name);
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let poisoned = submit_as(
        &d,
        &token,
        json!({"command": ["sh", "-c", "echo ran as $(id -u)"], "env": {"PATH": path, "LD_PRELOAD": preload.display().to_string()}}),
    );
    let bare = submit_as(&d, &token, json!({"command": "grep -E '^(NoNewPrivs|CapEff)' /proc/self/status"}));
    // A working directory is entered as the user: root's own is closed to alice.
    let (st, v) = d.req("POST", "/api/v1/jobs", &token, Some(&json!({"command": "pwd", "workdir": "relative/dir"})));
    assert_eq!(st, 400, "{v}");
    let roots = submit_as(&d, &token, json!({"command": "pwd", "workdir": "/root"}));
    d.wait_ended(&[poisoned, bare, roots], Duration::from_secs(60));
    assert_eq!(d.job(roots)["state"], "failed", "{}", log(&d, roots));
    let err = std::fs::read_to_string(d.data.join(format!("jobs/{roots}/rank0.err"))).unwrap_or_default();
    assert!(err.contains("cannot start") && err.contains("Permission denied"), "{err}");
    assert_eq!(d.job(poisoned)["state"], "succeeded", "{}", log(&d, poisoned));
    assert!(log(&d, poisoned).contains(&format!("ran as {}", alice.uid)), "{}", log(&d, poisoned));
    let text = std::fs::read_to_string(&record).expect("the job's own sh and library ran (so this test can fail)");
    assert!(text.contains("sh ") && text.contains("preload "), "both ran: {text}");
    for line in text.lines() {
        let uid: u32 = line.split_whitespace().nth(1).and_then(|u| u.parse().ok()).expect("a uid");
        assert_eq!(uid, alice.uid, "something of the job's ran as uid {uid}: {text}");
    }
    assert_ne!(std::fs::metadata(&record).expect("record").uid(), 0, "root wrote the record");
    let status = log(&d, bare);
    assert!(status.contains("NoNewPrivs:\t1"), "{status}");
    assert!(status.contains("CapEff:\t0000000000000000"), "{status}");

    // A three-stage pipeline whose stages run as alice shares its directory.
    let yaml = "name: three\nstages:\n  - {name: a, command: 'echo one > \"$GPOOL_PIPELINE_DIR/f\"'}\n  \
                - {name: b, needs: [a], command: 'cat \"$GPOOL_PIPELINE_DIR/f\" > \"$GPOOL_PIPELINE_DIR/g\"; echo two >> \"$GPOOL_PIPELINE_DIR/g\"', resources: {nvidia.com/gpu: 1}}\n  \
                - {name: c, needs: [b], command: 'cat \"$GPOOL_PIPELINE_DIR/g\"'}\n";
    let (s201, v) = d.raw("/api/v1/pipelines", &token, "application/yaml", yaml.as_bytes().to_vec());
    assert_eq!(s201, 201, "{v}");
    let run = serde_json::from_str::<serde_json::Value>(&v).expect("json")["run"].as_u64().expect("run id");
    let done = d.until(&format!("/api/v1/pipelines/{run}"), Duration::from_secs(60), |v| {
        ["succeeded", "failed", "cancelled"].contains(&v["state"].as_str().unwrap_or(""))
    });
    assert_eq!(done["state"], "succeeded", "{done:#}");
    let last = done["stages"][2]["job"].as_u64().expect("the last stage's job");
    assert_eq!(log(&d, last).trim(), "one\ntwo", "{done:#}");
}

/// Images are named by registry reference: a path behind a transport, which
/// root's runtime would open with root's rights, and a bare image id, which
/// would run what another user left in the node's store, are refused.
/// A body nested 100,000 deep with a bogus token is refused at once, and
/// the API keeps answering meanwhile; a user's names refuse bidi overrides.
#[test]
fn paths_as_images_deep_bodies_and_disguised_names_are_refused_at_the_door() {
    let s = Scratch::new("escapes-door");
    let d = Daemon::start(&s.0.join("data"), "1xH100-80GB", &[]);
    let token = d.token_for("bob");
    for (image, why) in [
        ("docker-archive:/home/other/private.tar", "transport"),
        ("oci-archive:/tmp/x.tar", "transport"),
        ("dir:/root", "transport"),
        ("0123456789ab", "image id"),
    ] {
        let (st, v) = d.req("POST", "/api/v1/jobs", &token, Some(&json!({"command": "true", "image": image})));
        assert_eq!(st, 400, "{image}: {v}");
        assert!(v.to_string().contains(why), "{image}: {v}");
    }
    let (st, v) = d.req("POST", "/api/v1/jobs", &token, Some(&json!({"command": "true", "name": "x\u{202E}gnp"})));
    assert_eq!(st, 400, "{v}");
    assert!(v.to_string().contains("U+202E"), "{v}");

    let deep = format!("command: {}x{}\n", "[".repeat(100_000), "]".repeat(100_000)).into_bytes();
    let healthy = std::sync::atomic::AtomicBool::new(true);
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let t = Instant::now();
                let ok = d.text("/healthz").0 == 200;
                if !ok || t.elapsed() > Duration::from_secs(1) {
                    healthy.store(false, std::sync::atomic::Ordering::Relaxed);
                }
            }
        });
        let senders: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    let t = Instant::now();
                    let (st, body) = d.raw("/api/v1/jobs", "bogus-token", "application/yaml", deep.clone());
                    (st, body, t.elapsed())
                })
            })
            .collect();
        for h in senders {
            let (st, body, took) = h.join().expect("sender");
            assert_eq!(st, 401, "{body}");
            assert!(took < Duration::from_secs(1), "answered in {took:?}");
        }
        // With a valid token the depth is refused before the YAML parser sees it.
        let t = Instant::now();
        let (st, body) = d.raw("/api/v1/jobs", &token, "application/yaml", deep.clone());
        assert_eq!(st, 400, "{body}");
        assert!(body.contains("deep"), "{body}");
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        // Anchors and aliases that would expand to 10^9 strings (a "billion
        // laughs"), in a body of 1 KiB: the parser's budget refuses them.
        let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for (prev, next) in
            ["a", "b", "c", "d", "e", "f", "g", "h"].iter().zip(["b", "c", "d", "e", "f", "g", "h", "i"])
        {
            bomb.push_str(&format!("{next}: &{next} [{}]\n", vec![format!("*{prev}"); 10].join(", ")));
        }
        bomb.push_str("command: [\"true\"]\n");
        let t = Instant::now();
        let (st, body) = d.raw("/api/v1/jobs", &token, "application/yaml", bomb.into_bytes());
        assert_eq!(st, 400, "{body}");
        assert!(body.contains("alias") || body.contains("budget"), "refused for its aliases: {body}");
        assert!(t.elapsed() < Duration::from_secs(5), "expanded before refusing? {:?}", t.elapsed());
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    assert!(healthy.load(std::sync::atomic::Ordering::Relaxed), "/healthz stopped answering within 1 s");
}

/// A user plants a link at the next job's directory in a shared, writable
/// checkpoint root: the root daemon refuses to follow it, the job fails
/// saying so, and the link's target keeps its owner and mode.
#[test]
fn a_link_planted_in_a_shared_checkpoint_root_gives_nobody_anything() {
    let s = Scratch::new("escapes-link");
    let tag = std::process::id() % 100_000;
    let mallory = User::create(&format!("gpm{tag}"));
    let root = s.0.join("ckpt");
    std::fs::create_dir_all(&root).expect("root");
    std::fs::set_permissions(&s.0, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o1777)).expect("shared and writable");
    let precious = s.0.join("precious");
    std::fs::create_dir_all(&precious).expect("target");
    std::fs::set_permissions(&precious, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let link = root.join("job-1");
    std::os::unix::fs::symlink(&precious, &link).expect("plant");
    std::os::unix::fs::lchown(&link, Some(mallory.uid), None).expect("the link is mallory's");
    let d = Daemon::start(
        &s.0.join("data"),
        "1xH100-80GB",
        &["--run-as", "user", "--checkpoint-root", &root.display().to_string()],
    );
    let token = d.token_for(&mallory.name);
    let first = submit_as(&d, &token, json!({"command": "ls -la $GPOOL_CHECKPOINT_DIR"}));
    d.wait_ended(&[first], Duration::from_secs(60));
    assert_eq!(d.job(first)["state"], "failed", "{}", d.job(first));
    let events = d.history(first, Duration::from_secs(10));
    assert!(events.iter().any(|e| e["message"].as_str().is_some_and(|m| m.contains("symbolic link"))), "{events:?}");
    let m = std::fs::metadata(&precious).expect("target");
    assert_eq!((m.uid(), m.mode() & 0o7777), (0, 0o755), "the link's target was changed");
    let second = submit_as(&d, &token, json!({"command": "echo ok > $GPOOL_CHECKPOINT_DIR/f"}));
    d.wait_ended(&[second], Duration::from_secs(60));
    assert_eq!(d.job(second)["state"], "succeeded", "{}", log(&d, second));
    let m = std::fs::metadata(root.join("job-2")).expect("job 2's directory");
    assert_eq!((m.uid(), m.mode() & 0o777), (mallory.uid, 0o700));
}

const SUID: &str = r#"#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (setuid(0) != 0) { /* not root: stay as we are */ }
    printf("uid=%d euid=%d\n", (int)getuid(), (int)geteuid());
    if (argc > 1) {
        int in = open("/proc/self/exe", O_RDONLY), out = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0755);
        char buf[65536];
        ssize_t n;
        while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof buf)) > 0) write(out, buf, n);
        close(out);
        chmod(argv[1], 04755);
    }
    return 0;
}
"#;

/// A setuid-root program in the user's own image: inside, it stays the
/// job's uid with no capability and `NoNewPrivs`, the copy it leaves in the
/// checkpoint directory is not root's, and a root-owned setuid program that
/// root put there gives the user no root either (no new privileges, and
/// podman mounts the directory nosuid).
#[test]
fn a_setuid_program_in_a_users_image_gives_no_root() {
    let s = Scratch::new("escapes-suid");
    let tag = std::process::id() % 100_000;
    let alice = User::create(&format!("gps{tag}"));
    let suid = cc(&s.0, "suid", SUID, &["-static", "-O"]);
    let program = std::fs::read(&suid).expect("program");
    let image = Image::build_from(&s, "suid", 0, &[("suid", &program, 0o4755)]);
    let d = Daemon::start(
        &s.0.join("data"),
        "1xH100-80GB",
        &[
            "--run-as",
            "user",
            "--container-arg=--runtime=runc",
            "--container-arg=--ulimit=nofile=1024:1024",
            "--container-arg=--ulimit=nproc=1024:1024",
        ],
    );
    let token = d.token_for(&alice.name);
    let inside = submit_as(
        &d,
        &token,
        json!({"image": image.0, "command": "/suid $GPOOL_CHECKPOINT_DIR/copy; grep -E '^(NoNewPrivs|CapEff)' /proc/self/status"}),
    );
    d.wait_ended(&[inside], Duration::from_secs(120));
    let out = log(&d, inside);
    assert_eq!(d.job(inside)["state"], "succeeded", "{out}");
    assert!(out.contains(&format!("uid={0} euid={0}", alice.uid)), "{out}");
    assert!(out.contains("NoNewPrivs:\t1") && out.contains("CapEff:\t0000000000000000"), "{out}");
    let copy = d.data.join(format!("jobs/{inside}/checkpoint/copy"));
    let m = std::fs::metadata(&copy).expect("the program copied itself out");
    assert!(m.uid() != 0 || m.mode() & 0o4000 == 0, "a root-owned setuid file appeared: {:o}", m.mode());
    let (code, host, _) = alice_runs(&alice, &copy);
    assert_eq!(code, Some(0));
    assert!(host.contains(&format!("euid={}", alice.uid)), "run on the host: {host}");

    // Root puts a root-owned setuid program in the next job's checkpoint directory.
    let waits = submit_as(
        &d,
        &token,
        json!({"image": image.0, "command": "while [ ! -e $GPOOL_CHECKPOINT_DIR/ready ]; do sleep 0.1; done; $GPOOL_CHECKPOINT_DIR/rootsuid"}),
    );
    let dir = d.data.join(format!("jobs/{waits}/checkpoint"));
    let deadline = Instant::now() + Duration::from_secs(120);
    while !dir.is_dir() {
        assert!(Instant::now() < deadline, "job {waits} never got its checkpoint directory");
        std::thread::sleep(Duration::from_millis(100));
    }
    let planted = dir.join("rootsuid");
    std::fs::copy(&suid, &planted).expect("plant");
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o4755)).expect("setuid");
    std::fs::write(dir.join("ready"), b"").expect("ready");
    d.wait_ended(&[waits], Duration::from_secs(120));
    let out = log(&d, waits);
    assert!(out.contains(&format!("uid={0} euid={0}", alice.uid)), "{out}");
}

/// Runs `program` on the host as `user`; its exit code and output.
fn alice_runs(user: &User, program: &Path) -> (Option<i32>, String, String) {
    let out = Command::new("setpriv")
        .args([&format!("--reuid={}", user.uid), &format!("--regid={}", user.name), "--init-groups", "--"])
        .arg(program)
        .output()
        .expect("setpriv");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
