//! Issue 40, point 8: jobs in images through docker (Debian's `docker.io`),
//! and a registry login used for a real authenticated pull. The test starts
//! its own `dockerd` (no iptables, no bridge, the vfs driver, its own data
//! and exec roots and socket) and a password-protected registry (Debian's
//! `docker-registry`, htpasswd with bcrypt) on loopback, and stops both.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const LIMIT: Duration = Duration::from_secs(120);

/// A `dockerd` of the test's own, killed at drop.
struct Dockerd {
    child: Child,
    host: String,
    dir: PathBuf,
}

impl Dockerd {
    fn start() -> Dockerd {
        // A short path: the daemon's sockets live under it.
        let dir = PathBuf::from(format!("/tmp/gpool-dockerd-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dockerd's directory");
        let sock = dir.join("docker.sock");
        let log = std::fs::File::create(dir.join("dockerd.log")).expect("log");
        let child = Command::new("dockerd")
            .args(["--iptables=false", "--ip6tables=false", "--bridge=none", "--storage-driver=vfs"])
            .arg("--data-root")
            .arg(dir.join("data"))
            .arg("--exec-root")
            .arg(dir.join("exec"))
            .arg("--pidfile")
            .arg(dir.join("docker.pid"))
            .arg("-H")
            .arg(format!("unix://{}", sock.display()))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("dockerd is installed (scripts/test.sh installs docker.io)");
        let d = Dockerd { child, host: format!("unix://{}", sock.display()), dir };
        let deadline = Instant::now() + LIMIT;
        while !d.docker(&["version"]).status.success() {
            assert!(
                Instant::now() < deadline,
                "dockerd never answered: {}",
                std::fs::read_to_string(d.dir.join("dockerd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        d
    }

    /// Runs the docker client against this daemon, with its own configuration directory.
    fn docker(&self, args: &[&str]) -> std::process::Output {
        Command::new("/usr/bin/docker")
            .args(args)
            .env("DOCKER_HOST", &self.host)
            .env("DOCKER_CONFIG", self.dir.join("client"))
            .output()
            .expect("run docker")
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.docker(args);
        assert!(out.status.success(), "docker {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn containers_of(&self, job: u64) -> Vec<String> {
        self.ok(&["ps", "-a", "-q", "--filter", &format!("label=gpool.job={job}")])
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect()
    }
}

impl Drop for Dockerd {
    fn drop(&mut self) {
        let ids = self.docker(&["ps", "-a", "-q"]);
        for id in String::from_utf8_lossy(&ids.stdout).lines() {
            let _ = self.docker(&["rm", "-f", id]);
        }
        // Stopped, not killed, so that it unmounts its data root and network namespace itself.
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        // What it left mounted (its network namespace's file), deepest first.
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        let mut left: Vec<&str> = mounts
            .lines()
            .filter_map(|l| l.split_whitespace().nth(1))
            .filter(|m| Path::new(m).starts_with(&self.dir))
            .collect();
        left.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in left {
            let _ = Command::new("umount").arg(m).output();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A registry on loopback that wants user `ana` with `password`, killed at drop.
struct Registry {
    child: Child,
    addr: String,
}

impl Registry {
    fn start(dir: &Path, password: &str) -> Registry {
        std::fs::create_dir_all(dir).expect("registry's directory");
        let htpasswd = Command::new("htpasswd")
            .args(["-Bbn", "ana", password])
            .output()
            .expect("htpasswd is installed (scripts/test.sh installs apache2-utils)");
        assert!(htpasswd.status.success());
        std::fs::write(dir.join("htpasswd"), &htpasswd.stdout).expect("htpasswd file");
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a port").port();
        let addr = format!("127.0.0.1:{port}");
        let config = format!(
            "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {addr}\nauth:\n  htpasswd:\n    realm: gpool-test\n    path: {}\n",
            dir.join("store").display(),
            dir.join("htpasswd").display()
        );
        std::fs::write(dir.join("config.yml"), config).expect("config");
        let log = std::fs::File::create(dir.join("registry.log")).expect("log");
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(dir.join("config.yml"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("docker-registry is installed (scripts/test.sh installs it)");
        let deadline = Instant::now() + LIMIT;
        while std::net::TcpStream::connect(&addr).is_err() {
            assert!(Instant::now() < deadline, "the registry never listened");
            std::thread::sleep(Duration::from_millis(100));
        }
        Registry { child, addr }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn docker_runs_jobs_in_images_and_a_login_pulls_from_a_private_registry() {
    let s = Scratch::new("docker");
    let docker = Dockerd::start();
    let tar = image::rootfs_tar(&s, "docker", 0, &[]);
    let tar = tar.display().to_string();
    docker.ok(&["import", "--change", "ENV PATH=/bin", &tar, "gpool-e2e-docker:1"]);
    let d = Daemon::spawn_with_env(
        &s.0.join("data"),
        &["--simulate-gpus", "1xH100-80GB", "--container-runtime", "/usr/bin/docker"],
        &[("DOCKER_HOST", &docker.host)],
    );
    let (ok, nodes, _) = d.cli(&["nodes"]);
    assert!(ok && nodes.contains("images by docker"), "the node runs images through docker: {nodes}");

    // A job in a local image: its exit code, its files, its GPU; no container left.
    let script = "cat /IMAGE; echo gpus=$CUDA_VISIBLE_DEVICES; exit 3";
    let (code, out, err) =
        d.cli_code(&["submit", "--gpus", "1", "--image", "gpool-e2e-docker:1", "--wait", "--", "sh", "-c", script]);
    assert_eq!(code, Some(3), "the container's exit code: {out}{err}");
    let id: u64 = out.lines().next().and_then(|l| l.trim().parse().ok()).expect("the job id");
    let (_, logs, _) = d.cli(&["logs", &id.to_string()]);
    assert!(logs.contains("inside the image") && logs.contains("gpus=0"), "{logs}");
    assert!(docker.containers_of(id).is_empty(), "{:?}", docker.containers_of(id));

    // An image only in a registry that wants a password.
    let registry = Registry::start(&s.0.join("registry"), "s3cret");
    let remote = format!("{}/team/private:1", registry.addr);
    docker.ok(&["tag", "gpool-e2e-docker:1", &remote]);
    let mut login = Command::new("/usr/bin/docker")
        .args(["login", &registry.addr, "-u", "ana", "--password-stdin"])
        .env("DOCKER_HOST", &docker.host)
        .env("DOCKER_CONFIG", docker.dir.join("client"))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("docker login");
    std::io::Write::write_all(&mut login.stdin.take().expect("stdin"), b"s3cret").expect("password");
    assert!(login.wait().expect("login").success());
    docker.ok(&["push", &remote]);
    docker.ok(&["logout", &registry.addr]);
    docker.ok(&["rmi", &remote, "gpool-e2e-docker:1"]);

    // Without a login the pull is refused, and the job says so.
    let (code, out, err) = d.cli_code(&["submit", "--image", &remote, "--wait", "--", "sh", "-c", "cat /IMAGE"]);
    assert_ne!(code, Some(0), "no login, no image: {out}{err}");
    let id: u64 = out.lines().next().and_then(|l| l.trim().parse().ok()).expect("the job id");
    let job = d.job(id);
    let reason = job["reason"].as_str().unwrap_or_default().to_string();
    assert!(reason.contains(&remote), "the reason names the image: {job}");

    // With the owner's login, the node pulls it and the job runs.
    let mut login = Command::new(BIN)
        .args(["registry", "login", &registry.addr, "-u", "ana", "--password-stdin"])
        .env("GPOOL_SERVER", &d.url)
        .env("GPOOL_TOKEN", &d.token)
        .stdin(Stdio::piped())
        .spawn()
        .expect("gpool registry login");
    std::io::Write::write_all(&mut login.stdin.take().expect("stdin"), b"s3cret\n").expect("password");
    assert!(login.wait().expect("login").success());
    let (code, out, err) = d.cli_code(&["submit", "--image", &remote, "--wait", "--", "sh", "-c", "cat /IMAGE"]);
    assert_eq!(code, Some(0), "pulled with the login: {out}{err}");
    let id: u64 = out.lines().next().and_then(|l| l.trim().parse().ok()).expect("the job id");
    let (_, logs, _) = d.cli(&["logs", &id.to_string()]);
    assert!(logs.contains("inside the image"), "{logs}");
    assert!(docker.ok(&["images", "-q", &remote]).trim().len() > 1, "the image is on the node now");
    // The login never reaches the job's environment or the node's own docker configuration.
    let (_, shown, _) = d.cli(&["show", &id.to_string(), "-o", "json"]);
    assert!(!shown.contains("s3cret"), "{shown}");
    assert!(
        !std::fs::read_to_string(docker.dir.join("client/config.json")).unwrap_or_default().contains(&registry.addr)
    );
}
