//! Issue 43: the repository's `Containerfile` builds with podman, and its
//! image runs the control plane: `gpool serve --help`, then a real `gpool
//! serve` as the unprivileged user, healthy by its own HEALTHCHECK (`gpool
//! ping`), a token made inside it taken by the API from outside, and its
//! state kept in a volume across a restart.
//!
//! CI reaches no registry, so the runtime image is made here the way the
//! distroless one is: the C library and libgcc (this machine's, which the
//! binary was built against), a passwd file with `nonroot` (65532), /tmp;
//! and the binary under test goes in through the Containerfile's `prebuilt`
//! stage instead of a build in a Rust image.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::*;

fn podman(args: &[&str]) -> Output {
    Command::new("podman")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("podman {args:?}: {e} (scripts/test.sh installs podman)"))
}

fn said(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn ok(args: &[&str]) -> String {
    let o = podman(args);
    assert!(o.status.success(), "podman {args:?}:\n{}", said(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Podman's names of this test's images, container and volume: removed at drop.
struct Made {
    runtime: String,
    image: String,
    container: String,
    volume: String,
}

impl Drop for Made {
    fn drop(&mut self) {
        let _ = podman(&["rm", "-f", "-t", "0", &self.container]);
        let _ = podman(&["volume", "rm", "-f", &self.volume]);
        let _ = podman(&["rmi", "-f", &self.image, &self.runtime]);
        // The build's stages left untagged images (the prebuilt one holds the
        // binary); podman 4.3 cannot build this file with --layers=false.
        // No other test builds images, and the others' are all tagged.
        let _ = podman(&["image", "prune", "-f"]);
    }
}

/// A distroless-like root file system: the binary's shared libraries at the
/// paths `ldd` names, users root and nonroot, /tmp; as a tar file.
fn runtime_rootfs(s: &Scratch, bin: &Path) -> PathBuf {
    let root = s.0.join("runtime");
    for dir in ["etc", "tmp", "home/nonroot"] {
        std::fs::create_dir_all(root.join(dir)).expect("rootfs");
    }
    std::fs::set_permissions(root.join("tmp"), std::os::unix::fs::PermissionsExt::from_mode(0o1777)).expect("tmp");
    let ldd = Command::new("ldd").arg(bin).output().expect("ldd");
    let libs: Vec<String> = String::from_utf8_lossy(&ldd.stdout)
        .split_whitespace()
        .filter(|w| w.starts_with('/'))
        .map(str::to_string)
        .collect();
    assert!(libs.iter().any(|l| l.contains("libc.so")), "ldd named no C library: {}", said(&ldd));
    for lib in &libs {
        let to = root.join(lib.trim_start_matches('/'));
        std::fs::create_dir_all(to.parent().expect("a folder")).expect("lib folder");
        std::fs::copy(lib, &to).unwrap_or_else(|e| panic!("copy {lib}: {e}"));
    }
    std::fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
    )
    .expect("passwd");
    std::fs::write(root.join("etc/group"), "root:x:0:\nnonroot:x:65532:\n").expect("group");
    let tar = s.0.join("runtime.tar");
    let st = Command::new("tar")
        .arg("-C")
        .arg(&root)
        .args(["--owner=0", "--group=0", "-cf"])
        .arg(&tar)
        .arg(".")
        .status()
        .expect("tar");
    assert!(st.success());
    tar
}

#[test]
fn the_containerfile_builds_an_image_that_serves_as_nonroot_keeps_its_state_and_says_it_is_healthy() {
    let s = Scratch::new("image");
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the repository");
    let bin = Path::new(BIN).canonicalize().expect("the binary under test");
    let prebuilt = bin.strip_prefix(&repo).unwrap_or_else(|_| {
        panic!(
            "{} is outside {}: the image's build context (set no CARGO_TARGET_DIR outside it)",
            bin.display(),
            repo.display()
        )
    });
    let id = std::process::id();
    let made = Made {
        runtime: format!("localhost/gpool-image-test-runtime-{id}:1"),
        image: format!("localhost/gpool-image-test-{id}:1"),
        container: format!("gpool-image-test-{id}"),
        volume: format!("gpool-image-test-{id}"),
    };
    let tar = runtime_rootfs(&s, &bin);
    ok(&["import", tar.to_str().expect("a path"), &made.runtime]);

    // The repository's Containerfile, as shipped, with the binary under test.
    let context = repo.to_str().expect("a path");
    let containerfile = repo.join("Containerfile");
    ok(&[
        "build",
        "--format",
        "docker",
        "--build-arg",
        &format!("RUNTIME_IMAGE={}", made.runtime),
        "--build-arg",
        "BINARY=prebuilt",
        "--build-arg",
        &format!("PREBUILT={}", prebuilt.display()),
        "-t",
        &made.image,
        "-f",
        containerfile.to_str().expect("a path"),
        context,
    ]);
    let config = ok(&["image", "inspect", &made.image, "--format", "{{.Config.User}}|{{json .Config.Healthcheck}}"]);
    assert!(config.starts_with("65532:65532|"), "the control plane runs as nonroot: {config}");
    assert!(config.contains("\"ping\""), "the health check is gpool ping: {config}");

    // These machines refuse podman's default resource limits and crun, and
    // run no systemd for health check timers: the test runs the check itself.
    let limits =
        ["--runtime=runc", "--ulimit=nofile=1024:1024", "--ulimit=nproc=1024:1024", "--health-interval=disable"];
    let mut help = vec!["run", "--rm"];
    help.extend(limits);
    help.extend([made.image.as_str(), "serve", "--help"]);
    let help = ok(&help);
    assert!(help.contains("Run the control plane alone"), "{help}");

    let mut run = vec!["run", "-d", "--name", &made.container, "-p", "127.0.0.1::7878"];
    let volume = format!("{}:/var/lib/gpool", made.volume);
    run.extend(["-v", &volume]);
    run.extend(limits);
    run.push(&made.image);
    ok(&run);
    let healthy = |what: &str| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let o = podman(&["healthcheck", "run", &made.container]);
            if o.status.success() {
                break;
            }
            let logs = podman(&["logs", &made.container]);
            assert!(Instant::now() < deadline, "{what}: never healthy: {}\nits log:\n{}", said(&o), said(&logs));
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    healthy("started");

    // A token made inside (the daemon's own user, over its socket), used from outside.
    let token = ok(&["exec", &made.container, "gpool", "token", "create", "--user", "ana", "-o", "json"]);
    let token: serde_json::Value = serde_json::from_str(&token).unwrap_or_else(|e| panic!("{e}: {token}"));
    let token = token["token"].as_str().expect("a secret").to_string();
    // TLS by default, with the CA the control plane made in its state folder.
    let ca_file = s.0.join("ca.pem");
    ok(&["cp", &format!("{}:/var/lib/gpool/tls/ca.pem", made.container), ca_file.to_str().expect("a path")]);
    let pem = std::fs::read(&ca_file).expect("the CA");
    let ca = ureq::tls::Certificate::from_pem(&pem).expect("a PEM certificate").to_owned();
    let roots = ureq::tls::RootCerts::Specific(std::sync::Arc::new(vec![ca]));
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .tls_config(ureq::tls::TlsConfig::builder().root_certs(roots).build())
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let port = ok(&["port", &made.container, "7878"]);
    let url = format!("https://{}", port.trim());
    let whoami = |url: &str| -> serde_json::Value {
        let mut resp = agent
            .get(format!("{url}/api/v1/whoami"))
            .header("Authorization", format!("Bearer {token}"))
            .call()
            .unwrap_or_else(|e| panic!("GET {url}/api/v1/whoami: {e}"));
        resp.body_mut().read_json().expect("json")
    };
    assert_eq!(whoami(&url)["user"], "ana");

    // The state is the volume's: the token still works after a restart.
    ok(&["restart", "-t", "10", &made.container]);
    healthy("restarted");
    let port = ok(&["port", &made.container, "7878"]);
    assert_eq!(whoami(&format!("https://{}", port.trim()))["user"], "ana");
    let files = ok(&["exec", &made.container, "gpool", "ping", "-o", "json"]);
    assert!(files.contains("\"state\": \"up\""), "gpool ping over the data folder's socket: {files}");
    drop(made);
}
