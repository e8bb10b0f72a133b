//! The step on a real kernel, as root (the shim's case): each stage does
//! what it says, and each refusal names its stage, its subject and the errno.

use std::os::unix::fs::OpenOptionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use gpool_spawn::{Account, Refusal, Step};

/// nobody, with no supplementary group.
const NOBODY: Account = Account { uid: 65534, gid: 65534, groups: Vec::new() };

/// Runs `sh -c script` with `step`; its output, or the refusal.
fn run(step: Step, script: &str) -> Result<String, Refusal> {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", script]).env_clear().env("PATH", "/usr/bin:/bin").stdout(Stdio::piped()).stderr(Stdio::piped());
    if step.terminal.is_none() {
        cmd.process_group(0);
    }
    let info = step.install(&mut cmd)?;
    let child = cmd.spawn().map_err(|e| Refusal::from_spawn(&e, &info, "sh"))?;
    let out = child.wait_with_output().expect("wait");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{script}: {}: {stdout}{stderr}", out.status);
    Ok(stdout.into_owned())
}

#[test]
fn the_process_drops_to_its_account_for_good_and_cannot_gain_privileges() {
    let account = Account { groups: vec![65534, 100], ..NOBODY };
    let step = Step { account: Some(account), no_new_privs: true, ..Step::default() };
    let out = run(step, "id -u; id -g; id -G; grep -E '^(NoNewPrivs|CapEff|Uid|Gid)' /proc/self/status; pwd")
        .expect("started");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(&lines[..3], ["65534", "65534", "65534 100"], "{out}");
    assert!(out.contains("NoNewPrivs:\t1"), "{out}");
    assert!(out.contains("CapEff:\t0000000000000000"), "{out}");
    // Real, effective, saved and file-system ids are all the account's.
    assert!(out.contains("Uid:\t65534\t65534\t65534\t65534"), "{out}");
    assert!(out.contains("Gid:\t65534\t65534\t65534\t65534"), "{out}");
    assert_eq!(lines.last(), Some(&"/"), "with no working directory it starts in /: {out}");
}

#[test]
fn without_an_account_the_process_stays_as_it_was() {
    let out = run(Step::default(), "id -u; grep NoNewPrivs /proc/self/status").expect("started");
    assert!(out.starts_with("0\n") && out.contains("NoNewPrivs:\t0"), "{out}");
}

/// A directory only root may enter.
fn closed_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("gpool-spawn-closed-{}", std::process::id()));
    let _ = std::fs::create_dir(&d);
    std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o700)).expect("chmod");
    d
}

#[test]
fn the_working_directory_is_entered_as_the_account() {
    let closed = closed_dir();
    // As root it is entered.
    let out = run(Step { cwd: Some(closed.clone()), ..Step::default() }, "pwd").expect("root enters");
    assert_eq!(out.trim(), closed.display().to_string());
    // As nobody it is refused, naming the command, the directory and the errno.
    let refused = run(Step { cwd: Some(closed.clone()), account: Some(NOBODY), ..Step::default() }, "pwd");
    let _ = std::fs::remove_dir(&closed);
    let Err(Refusal::Start(why)) = &refused else { panic!("entered as nobody: {refused:?}") };
    assert!(why.contains("\"sh\"") && why.contains(&closed.display().to_string()), "{why}");
    assert!(why.contains("Permission denied"), "{why}");
    assert_eq!(refused.unwrap_err().code(), 127);
}

#[test]
fn a_program_that_is_not_there_is_refused_with_its_name() {
    let mut cmd = Command::new("no-such-program-gpool");
    let info = Step::default().install(&mut cmd).expect("install");
    let e = cmd.spawn().expect_err("not there");
    let refused = Refusal::from_spawn(&e, &info, "no-such-program-gpool");
    assert_eq!(refused.code(), 127);
    let why = refused.to_string();
    assert!(why.contains("\"no-such-program-gpool\"") && why.contains("No such file"), "{why}");
}

#[test]
fn a_file_that_is_not_a_program_is_refused_with_a_shells_126() {
    let file = std::env::temp_dir().join(format!("gpool-spawn-data-{}", std::process::id()));
    std::fs::write(&file, b"not a program").expect("write");
    let mut cmd = Command::new(&file);
    let info = Step::default().install(&mut cmd).expect("install");
    let e = cmd.spawn().expect_err("not executable");
    let _ = std::fs::remove_file(&file);
    let refused = Refusal::from_spawn(&e, &info, "data");
    assert_eq!(refused.code(), 126, "{refused}");
    assert!(refused.to_string().contains("Permission denied"), "{refused}");
}

#[test]
fn a_group_that_cannot_be_joined_is_named_and_nothing_runs() {
    let missing = Path::new("/nonexistent/gpool/cgroup.procs").to_path_buf();
    let marker = std::env::temp_dir().join(format!("gpool-spawn-ran-{}", std::process::id()));
    let step = Step { join: vec![missing.clone()], ..Step::default() };
    let refused = run(step, &format!("touch {}", marker.display()));
    let Err(Refusal::Confine(why)) = &refused else { panic!("not refused: {refused:?}") };
    assert!(why.contains("cannot join the control group /nonexistent/gpool/cgroup.procs"), "{why}");
    assert!(why.contains("No such file"), "{why}");
    assert_eq!(refused.unwrap_err().code(), 126);
    assert!(!marker.exists(), "the command ran although its group could not be joined");
    let _ = std::fs::remove_file(&marker);
}

#[test]
fn a_path_with_a_nul_byte_is_refused_before_the_fork() {
    let step = Step { cwd: Some(PathBuf::from("/tmp/a\0b")), ..Step::default() };
    let refused = step.install(&mut Command::new("true")).expect_err("refused");
    assert!(refused.to_string().contains("NUL"), "{refused}");
}

/// A control group this test may make: under cgroup v2's mount, or v1's
/// `pids` hierarchy (the one every v1 host mounts with no side effect).
fn scratch_group() -> PathBuf {
    let mounts = std::fs::read_to_string("/proc/self/mounts").expect("mounts");
    let base = mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (dir, kind, opts) = (f.get(1)?, f.get(2)?, f.get(3)?);
            (*kind == "cgroup2" || (*kind == "cgroup" && opts.split(',').any(|o| o == "pids")))
                .then(|| (PathBuf::from(dir), *kind == "cgroup2"))
        })
        // A v1 pids hierarchy first: on a hybrid host, v2's root has no controllers to spare.
        .min_by_key(|(_, v2)| *v2)
        .expect("a cgroup v2 mount or a v1 pids hierarchy");
    let group = base.0.join(format!("gpool-spawn-test-{}", std::process::id()));
    std::fs::create_dir(&group).expect("creating a control group needs root");
    group
}

#[test]
fn the_process_is_in_its_group_before_the_command_runs() {
    let group = scratch_group();
    let name = group.file_name().and_then(|n| n.to_str()).expect("name").to_string();
    let step = Step { join: vec![group.join("cgroup.procs")], account: Some(NOBODY), ..Step::default() };
    let out = run(step, "cat /proc/self/cgroup");
    let _ = std::fs::remove_dir(&group);
    let out = out.expect("started");
    assert!(out.lines().any(|l| l.ends_with(&format!("/{name}"))), "not in {name}: {out}");
}

#[test]
fn a_terminal_becomes_the_controlling_one_of_a_new_session() {
    use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC).expect("openpt");
    grantpt(&master).expect("grantpt");
    unlockpt(&master).expect("unlockpt");
    let name = ptsname(&master, Vec::new()).expect("ptsname");
    let slave: std::os::fd::OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        // Not this test process's terminal, whatever it is.
        .custom_flags(rustix::fs::OFlags::NOCTTY.bits() as i32)
        .open(name.to_str().expect("utf-8"))
        .expect("slave")
        .into();
    let mut cmd = Command::new("sh");
    // `ps -o tty=` would need procps: /dev/tty opens only for a process
    // with a controlling terminal, and field 6 of /proc's stat is the session.
    cmd.args(["-c", "(: < /dev/tty) 2>/dev/null && echo tty-ok; cut -d' ' -f6 /proc/self/stat"])
        .stdin(slave.try_clone().expect("clone"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let info = Step { terminal: Some(slave), ..Step::default() }.install(&mut cmd).expect("install");
    let child = cmd.spawn().map_err(|e| Refusal::from_spawn(&e, &info, "sh")).expect("started");
    let pid = child.id();
    let out = child.wait_with_output().expect("wait");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("tty-ok"), "no controlling terminal: {text}");
    // Field 6 of stat is the session id: a process of the new session's leader (the sh itself).
    assert!(text.lines().any(|l| l.trim() == pid.to_string()), "not its own session ({pid}): {text}");
    drop(master);
}
