//! Issue 43: `scripts/package.sh` makes a Debian package and a release
//! archive from one binary (here the one under test): the package holds the
//! binary, the three units (Type=notify, sandboxed, run from /usr/bin),
//! settings templates of mode 0600, man pages and completions; the archive
//! the same, with checksums that verify.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{cmd:?}:\n{said}");
    said
}

#[test]
fn the_package_and_the_archive_hold_what_an_operator_installs() {
    let s = Scratch::new("package");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = s.0.join("dist");
    let said = run(Command::new("bash")
        .arg(root.join("scripts/package.sh"))
        .args(["--fast", "--bin", BIN, "--out"])
        .arg(&out));
    let deb = said.lines().find(|l| l.ends_with(".deb")).unwrap_or_else(|| panic!("no .deb named:\n{said}"));
    let tarball = said.lines().find(|l| l.ends_with(".tar.gz")).unwrap_or_else(|| panic!("no archive named:\n{said}"));

    let listing = run(Command::new("dpkg-deb").args(["-c", deb]));
    for want in [
        "./usr/bin/gpool",
        "./lib/systemd/system/gpool-up.service",
        "./lib/systemd/system/gpool-serve.service",
        "./lib/systemd/system/gpool-agent.service",
        "./usr/share/man/man1/gpool.1.gz",
        "./usr/share/man/man1/gpool-submit.1.gz",
        "./usr/share/bash-completion/completions/gpool",
        "./usr/share/zsh/vendor-completions/_gpool",
        "./usr/share/fish/vendor_completions.d/gpool.fish",
        "./etc/default/gpool-up",
    ] {
        assert!(listing.lines().any(|l| l.ends_with(want)), "{want} not in the package:\n{listing}");
    }
    let defaults = listing.lines().find(|l| l.ends_with("./etc/default/gpool-serve")).expect("settings");
    assert!(defaults.starts_with("-rw------- root/root"), "settings hold secrets: {defaults}");
    let info = run(Command::new("dpkg-deb").args(["-I", deb]));
    for script in ["postinst", "prerm", "postrm", "conffiles"] {
        assert!(info.contains(script), "no {script}:\n{info}");
    }
    let control = run(Command::new("dpkg-deb").args(["-f", deb, "Package", "Version", "Depends"]));
    assert!(control.contains("Package: gpool") && control.contains("Depends: libc6, adduser"), "{control}");

    // The units as installed: run from /usr/bin, Type=notify, sandboxed.
    let x = s.0.join("x");
    run(Command::new("dpkg-deb").args(["-x", deb]).arg(&x));
    for unit in ["gpool-up", "gpool-serve", "gpool-agent"] {
        let text = std::fs::read_to_string(x.join(format!("lib/systemd/system/{unit}.service"))).expect("unit");
        assert!(text.contains("ExecStart=/usr/bin/gpool ") && !text.contains("/usr/local/bin"), "{unit}:\n{text}");
        assert!(text.contains("Type=notify") && text.contains("ProtectSystem="), "{unit}:\n{text}");
    }
    let man = run(Command::new("gzip").arg("-dc").arg(x.join("usr/share/man/man1/gpool-submit.1.gz")));
    assert!(man.contains(".TH gpool-submit") && man.contains("\\-\\-gpus"), "{man}");

    // The archive: the same pieces, and checksums that verify.
    let names = run(Command::new("tar").args(["-tzf", tarball]));
    for want in
        ["/bin/gpool", "/systemd/gpool-serve.service", "/man/man1/gpool.1.gz", "/completions/_gpool", "/INSTALL"]
    {
        assert!(names.lines().any(|l| l.ends_with(want)), "{want} not in the archive:\n{names}");
    }
    let sums = run(Command::new("sha256sum").arg("-c").arg("SHA256SUMS").current_dir(&out));
    assert_eq!(sums.matches(": OK").count(), 2, "{sums}");
}

/// A fresh Debian 12 (debootstrap) booted with its own systemd in a
/// container (systemd-nspawn); stopped and removed at drop.
struct Debian {
    root: std::path::PathBuf,
    nspawn: std::process::Child,
    init: u32,
}

impl Debian {
    fn boot(s: &Scratch) -> Debian {
        let root = s.0.join("debian12");
        run(Command::new("debootstrap")
            .args(["--variant=minbase", "--include=systemd,systemd-sysv,dbus,adduser", "bookworm"])
            .arg(&root)
            .arg("http://deb.debian.org/debian"));
        let nspawn = Command::new("systemd-nspawn")
            .args(["-q", "--register=no", "--keep-unit", "--console=pipe", "-b", "-D"])
            .arg(&root)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("systemd-nspawn (scripts/test.sh installs systemd-container)");
        // Its child is the container's systemd.
        let children = format!("/proc/{}/task/{}/children", nspawn.id(), nspawn.id());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let init = loop {
            if let Some(pid) =
                std::fs::read_to_string(&children).ok().and_then(|c| c.split_whitespace().next()?.parse().ok())
            {
                break pid;
            }
            assert!(std::time::Instant::now() < deadline, "systemd-nspawn started no init");
            std::thread::sleep(std::time::Duration::from_millis(100));
        };
        let debian = Debian { root, nspawn, init };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        loop {
            let state = debian.try_run(&["systemctl", "is-system-running"]).1;
            if matches!(state.trim(), "running" | "degraded") {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the container's systemd never finished booting: {state}");
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        debian
    }

    /// A command inside (every namespace of the container's init).
    fn try_run(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new("nsenter")
            .args(["-t", &self.init.to_string(), "-m", "-u", "-i", "-n", "-p", "--"])
            .args(args)
            .output()
            .expect("nsenter");
        (
            out.status.success(),
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
        )
    }

    fn run(&self, args: &[&str]) -> String {
        let (ok, said) = self.try_run(args);
        assert!(ok, "in Debian 12: {args:?}:\n{said}");
        said
    }
}

impl Drop for Debian {
    fn drop(&mut self) {
        let _ = self.try_run(&["systemctl", "poweroff"]);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while self.nspawn.try_wait().ok().flatten().is_none() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let _ = self.nspawn.kill();
        let _ = self.nspawn.wait();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Issue 43: the package installs on a fresh Debian 12, `systemctl start
/// gpool-up` (Type=notify: it returns once the API answers) gives a node
/// that runs a job on its GPU, removing the package keeps the state and
/// purging it deletes the state and the account.
#[test]
fn the_package_installs_on_a_fresh_debian_12_whose_systemd_starts_a_working_node() {
    let s = Scratch::new("package-debian");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let said = run(Command::new("bash")
        .arg(root.join("scripts/package.sh"))
        .args(["--fast", "--bin", BIN, "--out"])
        .arg(s.0.join("dist")));
    let deb = said.lines().find(|l| l.ends_with(".deb")).unwrap_or_else(|| panic!("no .deb named:\n{said}"));
    let debian = Debian::boot(&s);
    std::fs::copy(deb, debian.root.join("root/gpool.deb")).expect("the package, inside");
    debian.run(&["dpkg", "-i", "/root/gpool.deb"]);
    let account = debian.run(&["getent", "passwd", "gpool"]);
    assert!(account.contains(":/var/lib/gpool:/usr/sbin/nologin"), "the system account: {account}");
    let mode = debian.run(&["stat", "-c", "%a %U", "/etc/default/gpool-up"]);
    assert_eq!(mode.trim(), "600 root");
    let settings = debian.root.join("etc/default/gpool-up");
    let mut text = std::fs::read_to_string(&settings).expect("settings");
    // On a host with cgroup v1 controllers (this kind of CI machine),
    // systemd-nspawn gives the container those controllers read-only; on a
    // Debian 12 machine (cgroup v2) the unit's Delegate=yes gives gpool its
    // subtree. Jobs still run as their users (root here).
    text.push_str("GPOOL_UP_ARGS=\"--simulate-gpus 1xH100-80GB --cgroups off\"\n");
    std::fs::write(&settings, text).expect("settings");

    debian.run(&["systemctl", "start", "gpool-up"]);
    let status = debian.run(&["systemctl", "show", "gpool-up", "-p", "ActiveState,StatusText,NRestarts"]);
    assert!(
        status.contains("ActiveState=active") && status.contains("StatusText=serving http://127.0.0.1:7878"),
        "{status}"
    );
    let ping = debian.run(&["gpool", "ping"]);
    assert!(ping.contains(" up "), "{ping}");
    // `--wait` exits with the job's status; the store is new, so it is job 1.
    debian.run(&["gpool", "submit", "--gpus", "1", "--wait", "--", "sh", "-c", "echo gpus=$CUDA_VISIBLE_DEVICES"]);
    let log = debian.run(&["gpool", "logs", "1"]);
    assert!(log.contains("gpus=0"), "the job ran on the GPU: {log}");
    debian.run(&["systemctl", "stop", "gpool-up"]);

    debian.run(&["dpkg", "-r", "gpool"]);
    assert!(!debian.root.join("usr/bin/gpool").exists(), "removed");
    assert!(debian.root.join("var/lib/gpool/state.db").exists(), "removing keeps the state");
    debian.run(&["dpkg", "-P", "gpool"]);
    assert!(!debian.root.join("var/lib/gpool").exists(), "purging deletes the state");
    assert!(!debian.try_run(&["getent", "passwd", "gpool"]).0, "and the account");
}
