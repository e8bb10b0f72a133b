//! Jobs in OCI images: a replica whose spec names an `image` runs as
//! `podman run` (or `docker run`) under its shim, which supervises it like
//! any command: the stop signal reaches the container (`--sig-proxy`), its
//! exit code is the replica's, its output goes to the replica's logs. The
//! container is named `gpool-JOB-ATTEMPT-RANK-DIRHASH` and labelled
//! `gpool.job=JOB`; when the replica ends (or is found lost after a
//! restart) the agent removes it by name, so none is left behind after a
//! SIGKILL of the runtime's client. One trait-like struct per runtime
//! family; Apptainer or enroot would be another `Kind`.
//!
//! Accelerators: by CDI name (`--device nvidia.com/gpu=UUID`, MIG devices
//! by their `MIG-…` UUID) where a CDI specification of NVIDIA devices
//! exists (`nvidia-ctk cdi generate`); else `NVIDIA_VISIBLE_DEVICES` for
//! the NVIDIA container runtime, and the agent says so once. Simulated GPUs
//! are named in the environment only.
//!
//! At start-up a background thread checks that the runtime can run a
//! container at all here (`self_test`: a run of an empty local image,
//! bounded in time); if it cannot, image jobs on this node fail at once
//! with what went wrong and the flag that fixes it, instead of each one
//! failing (or hanging) in its own way.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::node::container_env::{ENV_FILE, container_env, fits_env_file};
use crate::node::devices::Passthrough;
use crate::protocol::Launch;

/// The file of a run directory that names its container: `PROGRAM NAME`.
pub const NAME_FILE: &str = "container";

/// Which command-line interface the runtime speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Podman,
    Docker,
}

/// A container runtime found on the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Runtime {
    pub kind: Kind,
    pub program: PathBuf,
    /// Extra words for `run` (`--container-arg`), e.g. `--runtime=runc`.
    pub run_args: Vec<String>,
    /// A CDI specification of NVIDIA devices exists.
    pub cdi: bool,
    /// Why it cannot run containers here, once the self-test has found out.
    pub broken: Broken,
}

/// Set once, by the self-test, when the runtime cannot run containers here.
#[derive(Clone, Debug, Default)]
pub struct Broken(Arc<OnceLock<String>>);

impl PartialEq for Broken {
    fn eq(&self, other: &Broken) -> bool {
        self.0.get() == other.0.get()
    }
}

impl Eq for Broken {}

/// The empty local image the self-test runs (made by `import` of an empty archive; no registry).
const PROBE_IMAGE: &str = "localhost/gpool-probe:1";
/// A program the probe image does not hold: a runtime that works answers 127.
const PROBE_PROGRAM: &str = "/gpool-probe";

/// What a probe run's exit code and standard error say about the runtime.
pub fn diagnose(code: Option<i32>, stderr: &str) -> Result<(), String> {
    if code == Some(127) {
        return Ok(());
    }
    let last = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
    let lower = stderr.to_ascii_lowercase();
    let fix = if lower.contains("rlimit") && lower.contains("not permitted") {
        "this machine does not let the runtime raise resource limits; pass explicit lower ones: \
         --container-arg=--ulimit=nofile=1024:1024 --container-arg=--ulimit=nproc=1024:1024"
    } else if lower.contains("crun") && lower.contains("cgroup") {
        "crun refuses this machine's cgroup layout; use runc: --container-arg=--runtime=runc (apt-get install runc)"
    } else if lower.contains("cannot connect") || lower.contains("is the docker daemon running") {
        "the runtime's service is not running (systemctl start docker, or podman system service)"
    } else {
        "see the runtime's message; `--container-arg` passes flags to every `run`"
    };
    let code = code.map_or_else(|| "a signal".to_string(), |c| c.to_string());
    Err(format!("a test container exited with {code}: {last}; {fix}"))
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(name)).find(|p| p.is_file())
}

fn nvidia_cdi() -> bool {
    ["/etc/cdi", "/var/run/cdi"].iter().any(|d| {
        std::fs::read_dir(d).is_ok_and(|mut r| {
            r.any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().to_ascii_lowercase().contains("nvidia")))
        })
    })
}

impl Runtime {
    /// The runtime `choice` names: `auto` (podman, else docker, else none),
    /// `podman`, `docker`, `none`, or a path to either program.
    pub fn detect(choice: &str, run_args: Vec<String>) -> Result<Option<Runtime>, String> {
        if let Some(why) = undoing_flag(&run_args) {
            return Err(why);
        }
        let found = |kind: Kind, name: &str| which(name).map(|program| (kind, program));
        let pick = match choice.trim() {
            "none" | "off" => return Ok(None),
            "auto" => found(Kind::Podman, "podman").or_else(|| found(Kind::Docker, "docker")),
            "podman" => Some(
                found(Kind::Podman, "podman")
                    .ok_or("--container-runtime podman: podman is not on PATH (apt-get install podman)")?,
            ),
            "docker" => Some(found(Kind::Docker, "docker").ok_or("--container-runtime docker: docker is not on PATH")?),
            path if Path::new(path).is_file() => {
                let kind = if path.contains("docker") { Kind::Docker } else { Kind::Podman };
                Some((kind, PathBuf::from(path)))
            }
            other => {
                return Err(format!("--container-runtime {other:?}: expected auto, podman, docker, none or a path"));
            }
        };
        Ok(pick.map(|(kind, program)| Runtime {
            kind,
            program,
            run_args,
            cdi: nvidia_cdi(),
            broken: Broken::default(),
        }))
    }

    /// Why it cannot run containers here, if the self-test found it cannot.
    pub fn broken(&self) -> Option<&str> {
        self.broken.0.get().map(String::as_str)
    }

    /// Runs [`Runtime::self_test`] in the background; a failure is said on standard error and kept.
    pub fn spawn_self_test(&self) {
        let rt = self.clone();
        let _ = std::thread::Builder::new().name("container-check".into()).spawn(move || {
            if let Err(why) = rt.self_test(Duration::from_secs(60)) {
                tracing::warn!(
                    "{} cannot run containers on this node: {why}; jobs with an image fail here until it is fixed",
                    rt.kind_name()
                );
                let _ = rt.broken.0.set(why);
            }
        });
    }

    /// Runs the empty probe image with this node's `run` flags, within `limit`.
    pub fn self_test(&self, limit: Duration) -> Result<(), String> {
        let exists = Command::new(&self.program)
            .args(["image", "inspect", PROBE_IMAGE])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !exists {
            // An empty tar archive: two zero blocks.
            let mut child = Command::new(&self.program)
                .args(["import", "-", PROBE_IMAGE])
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| format!("cannot run {}: {e}", self.program.display()))?;
            if let Some(mut stdin) = child.stdin.take() {
                let _ = stdin.write_all(&[0u8; 1024]);
            }
            let (code, err) = wait_within(child, limit)?;
            if code != Some(0) {
                return Err(format!("cannot make the probe image ({PROBE_IMAGE}): {}", err.trim()));
            }
        }
        let mut argv: Vec<String> = vec!["run".into(), "--rm".into(), "--network".into(), "none".into()];
        argv.extend(self.run_args.iter().cloned());
        argv.extend([PROBE_IMAGE.to_string(), PROBE_PROGRAM.to_string()]);
        let child = Command::new(&self.program)
            .args(&argv)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", self.program.display()))?;
        let (code, err) = wait_within(child, limit)?;
        diagnose(code, &err)
    }

    /// `podman` or `docker`.
    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            Kind::Podman => "podman",
            Kind::Docker => "docker",
        }
    }

    pub fn describe(&self) -> String {
        let kind = self.kind_name();
        let devices = if self.cdi {
            "GPUs by CDI"
        } else {
            "GPUs by NVIDIA_VISIBLE_DEVICES (no CDI spec: nvidia-ctk cdi generate)"
        };
        format!("{kind} ({}), {devices}", self.program.display())
    }

    /// How the shim checks for `launch`'s image and pulls it (with the owner's login, if any).
    /// `always`: no "is it here?" step, the registry must say this user may have it
    /// (`private_images.rs`).
    pub fn pull_steps(
        &self,
        launch: &Launch,
        auth_dir: Option<&Path>,
        always: bool,
    ) -> Option<crate::protocol::PullSteps> {
        let image = launch.image.clone()?;
        let program = self.program.display().to_string();
        let exists =
            if always { Vec::new() } else { vec![program.clone(), "image".into(), "inspect".into(), image.clone()] };
        let mut pull = vec![program];
        match (auth_dir, self.kind) {
            (Some(d), Kind::Docker) => pull.extend(["--config".to_string(), d.display().to_string(), "pull".into()]),
            (Some(d), Kind::Podman) => {
                pull.extend(["pull".to_string(), "--authfile".into(), d.join(AUTH_FILE).display().to_string()])
            }
            (None, _) => pull.push("pull".into()),
        }
        pull.push(image.clone());
        Some(crate::protocol::PullSteps { image, exists, pull })
    }

    /// The command that runs `launch` in its image: `RUNTIME run … IMAGE ARGV`.
    pub fn wrap(&self, launch: &Launch, c: &ContainerJob<'_>) -> Vec<String> {
        let image = launch.image.clone().unwrap_or_default();
        let mut a: Vec<String> = vec![self.program.display().to_string()];
        // The owner's registry login: docker reads a configuration directory, podman an auth file.
        if let (Some(d), Kind::Docker) = (c.auth_dir, self.kind) {
            a.extend(["--config".to_string(), d.display().to_string()]);
        }
        a.extend(["run".to_string(), "--rm".to_string()]);
        if let (Some(d), Kind::Podman) = (c.auth_dir, self.kind) {
            a.extend(["--authfile".to_string(), d.join(AUTH_FILE).display().to_string()]);
        }
        let mut push = |w: &[&str]| a.extend(w.iter().map(|s| s.to_string()));
        push(&["--name", c.name, "--label", &format!("gpool.job={}", c.job), "--network", "host"]);
        let pull = if c.pull_always { "always" } else { "missing" };
        push(&["--sig-proxy=true", "--pull", pull]);
        // An interactive job (`terminal.rs`): the runtime relays the shim's terminal to one in the container.
        if launch.tty_grace_ms.is_some() {
            push(&["--interactive", "--tty"]);
        }
        // Without privilege (Kubernetes' restricted profile): nothing in the
        // image, a setuid program included, can raise the job's rights, and it
        // holds no capability; the runtime's default seccomp profile stays.
        push(&["--security-opt", "no-new-privileges", "--cap-drop", "ALL"]);
        if let Some((uid, gid)) = c.user {
            push(&["--user", &format!("{uid}:{gid}")]);
        }
        if launch.cpus_milli > 0 {
            push(&["--cpus", &format!("{:.3}", launch.cpus_milli as f64 / 1000.0)]);
        }
        if launch.memory_mb > 0 {
            push(&["--memory", &format!("{}m", launch.memory_mb)]);
        }
        // The checkpoint directory at the same path inside, so GPOOL_CHECKPOINT_DIR holds,
        // and its pipeline run's directory, so GPOOL_PIPELINE_DIR holds too. Podman
        // mounts them nosuid and nodev: a setuid file there is inert inside.
        let host_dir = |d: &Path| match self.kind {
            Kind::Podman => format!("{0}:{0}:nosuid,nodev", d.display()),
            Kind::Docker => format!("{0}:{0}", d.display()),
        };
        push(&["-v", &host_dir(c.checkpoint)]);
        if let Some(shared) = c.shared {
            push(&["-v", &host_dir(shared)]);
        }
        if let Some(w) = c.workdir {
            push(&["-w", w]);
        }
        // The job's environment, but not the host's paths and identity: the
        // image has its own. From a root-only file, not the command line,
        // which every local user can read in /proc; a value of several lines
        // (which the file cannot hold) goes on the command line.
        if let Some(f) = c.env_file {
            push(&["--env-file", &f.display().to_string()]);
        }
        for (k, v) in container_env(launch) {
            if c.env_file.is_none() || !fits_env_file(k, v) {
                push(&["-e", &format!("{k}={v}")]);
            }
        }
        match c.passthrough {
            Passthrough::Nothing => {}
            Passthrough::Nvidia if self.cdi => {
                for d in c.devices {
                    push(&["--device", &format!("nvidia.com/gpu={d}")]);
                }
            }
            Passthrough::Nvidia => push(&["-e", &format!("NVIDIA_VISIBLE_DEVICES={}", c.devices.join(","))]),
            // AMD GPUs and TPU chips: their own files, and the groups that may open them.
            Passthrough::Files { files, groups, .. } => {
                for f in files {
                    push(&["--device", &f.display().to_string()]);
                }
                for g in groups {
                    push(&["--group-add", &g.to_string()]);
                }
            }
        }
        a.extend(self.run_args.iter().cloned());
        a.push(image);
        a.extend(launch.argv.iter().cloned());
        a
    }
}

/// Waits for `child` at most `limit` (then kills it); its exit code and standard error.
fn wait_within(mut child: std::process::Child, limit: Duration) -> Result<(Option<i32>, String), String> {
    let err = child.stderr.take();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut e) = err {
            let _ = std::io::Read::read_to_string(&mut e, &mut text);
        }
        text
    });
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok((status.code(), reader.join().unwrap_or_default())),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "the runtime did not answer within {}s (is it configured? try `podman info`)",
                    limit.as_secs()
                ));
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// What a replica's container needs besides its launch.
pub struct ContainerJob<'a> {
    pub name: &'a str,
    pub job: u64,
    pub devices: &'a [String],
    pub user: Option<(u32, u32)>,
    pub checkpoint: &'a Path,
    /// Its pipeline run's directory, if it is a stage of one.
    pub shared: Option<&'a Path>,
    /// The spec's working directory, inside the image.
    pub workdir: Option<&'a str>,
    /// What it is given for its devices (`devices.rs`).
    pub passthrough: &'a Passthrough,
    /// Where the owner's registry login is (`AUTH_DIR` of the run directory), if it has one.
    pub auth_dir: Option<&'a Path>,
    /// The root-only file of its variables (`write_env_file`); `None`: all on the command line.
    pub env_file: Option<&'a Path>,
    /// Pull even when the image is here: another user pulled it with a
    /// login, so this job must show the registry it may have it (`private_images.rs`).
    pub pull_always: bool,
}

/// `run` flags an admin may not pass with `--container-arg`: each would undo
/// the confinement of every job's container (privilege, capabilities,
/// seccomp or AppArmor, its user, the host's namespaces, or host paths and
/// devices beyond its own). Matched as `FLAG` and `FLAG=…`.
const UNDOING: &[&str] = &[
    "--privileged",
    "--cap-add",
    "--security-opt",
    "--user",
    "-u",
    "--group-add",
    "--userns",
    "--uidmap",
    "--gidmap",
    "--pid",
    "--ipc",
    "--cgroupns",
    "--cgroup-parent",
    "--device",
    "--device-cgroup-rule",
    "-v",
    "--volume",
    "--mount",
    "--volumes-from",
    "--env-host",
    "--systemd",
];

/// Why `run_args` would undo the containers' confinement: the flag named.
pub fn undoing_flag(run_args: &[String]) -> Option<String> {
    run_args.iter().find_map(|a| {
        let flag = a.split_once('=').map_or(a.as_str(), |(f, _)| f);
        UNDOING.contains(&flag).then(|| {
            format!(
                "--container-arg={a}: {flag} would undo the confinement of every job's container (no new \
                 privileges, no capabilities, the job's own user, only its own directories and devices); gpool \
                 refuses it (docs/containers.md)"
            )
        })
    })
}

/// The directory of a run directory holding the registry login (root only, 0700), and its file.
pub const AUTH_DIR: &str = "registry-auth";
pub const AUTH_FILE: &str = "config.json";

/// Writes the registry login where only root reads it; its directory.
pub fn write_auth(dir: &Path, auth: &str) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let d = dir.join(AUTH_DIR);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::DirBuilder::new().mode(0o700).create(&d)?;
    let mut f = std::fs::OpenOptions::new().create_new(true).write(true).mode(0o600).open(d.join(AUTH_FILE))?;
    f.write_all(auth.as_bytes())?;
    Ok(d)
}

/// Records which container a run directory's replica runs in, and its image.
pub fn remember(dir: &Path, rt: &Runtime, name: &str, image: &str) -> std::io::Result<()> {
    std::fs::write(dir.join(NAME_FILE), format!("{}\n{name}\n{image}\n", rt.program.display()))
}

/// The image a run directory's replica runs in, if it runs in one.
pub fn image_of(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join(NAME_FILE)).ok()?;
    text.lines().nth(2).filter(|l| !l.is_empty()).map(str::to_string)
}

/// Removes the container of an ended replica, if it had one (a runtime
/// client killed by SIGKILL leaves its container running).
pub fn remove(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir.join(AUTH_DIR));
    let _ = std::fs::remove_file(dir.join(ENV_FILE));
    let Ok(text) = std::fs::read_to_string(dir.join(NAME_FILE)) else { return };
    let mut lines = text.lines();
    let (Some(program), Some(name)) = (lines.next(), lines.next()) else { return };
    let _ = Command::new(program)
        .args(["rm", "-f", name])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launch_becomes_a_run_in_its_image_with_its_devices_and_limits() {
        let rt = Runtime {
            kind: Kind::Podman,
            program: "/usr/bin/podman".into(),
            run_args: vec!["--runtime=runc".into()],
            cdi: true,
            broken: Broken::default(),
        };
        let launch = Launch {
            argv: vec!["python3".into(), "train.py".into()],
            env: vec![("PATH".into(), "/host/bin".into()), ("CUDA_VISIBLE_DEVICES".into(), "GPU-a".into())],
            cpus_milli: 4000,
            memory_mb: 16_384,
            image: Some("pytorch/pytorch:2.5.1".into()),
            ..Launch::default()
        };
        let devices = vec!["GPU-a".to_string(), "MIG-b".to_string()];
        let c = ContainerJob {
            name: "gpool-7-1-0-abcd",
            job: 7,
            devices: &devices,
            user: Some((1000, 1000)),
            checkpoint: Path::new("/ckpt/job-7"),
            shared: Some(Path::new("/ckpt/pipeline-5")),
            workdir: Some("/workspace"),
            passthrough: &Passthrough::Nvidia,
            auth_dir: Some(Path::new("/run/job-7/registry-auth")),
            env_file: None,
            pull_always: false,
        };
        let argv = rt.wrap(&launch, &c).join(" ");
        for want in [
            "--name gpool-7-1-0-abcd --label gpool.job=7",
            "--user 1000:1000",
            "--cpus 4.000 --memory 16384m",
            "-v /ckpt/job-7:/ckpt/job-7:nosuid,nodev -v /ckpt/pipeline-5:/ckpt/pipeline-5:nosuid,nodev -w /workspace",
            "--pull missing --security-opt no-new-privileges --cap-drop ALL",
            "-e CUDA_VISIBLE_DEVICES=GPU-a",
            "--device nvidia.com/gpu=GPU-a --device nvidia.com/gpu=MIG-b",
            "--runtime=runc pytorch/pytorch:2.5.1 python3 train.py",
            "/usr/bin/podman run --rm --authfile /run/job-7/registry-auth/config.json --name",
        ] {
            assert!(argv.contains(want), "{want:?} in {argv}");
        }
        assert!(!argv.contains("/host/bin"), "the host's PATH stays outside: {argv}");
        let docker = Runtime { kind: Kind::Docker, program: "/usr/bin/docker".into(), ..rt.clone() };
        assert!(
            docker
                .wrap(&launch, &c)
                .join(" ")
                .starts_with("/usr/bin/docker --config /run/job-7/registry-auth run --rm")
        );
        let no_cdi = Runtime { cdi: false, ..rt };
        assert!(no_cdi.wrap(&launch, &c).join(" ").contains("-e NVIDIA_VISIBLE_DEVICES=GPU-a,MIG-b"));
        assert!(Runtime::detect("kubernetes", Vec::new()).is_err_and(|e| e.contains("expected auto")));
        assert!(!argv.contains("--privileged") && !argv.contains("--cap-add"), "{argv}");
        let again = ContainerJob { pull_always: true, ..c };
        assert!(no_cdi.wrap(&launch, &again).join(" ").contains("--pull always"));
        let filed = ContainerJob { env_file: Some(Path::new("/run/job-7/container.env")), ..c };
        let argv = no_cdi.wrap(&launch, &filed).join(" ");
        assert!(argv.contains("--env-file /run/job-7/container.env"), "{argv}");
        assert!(!argv.contains("--tty"), "a batch job has no terminal: {argv}");
        let interactive = Launch { tty_grace_ms: Some(60_000), ..launch.clone() };
        assert!(no_cdi.wrap(&interactive, &c).join(" ").contains("--interactive --tty"));
        assert!(!argv.contains("CUDA_VISIBLE_DEVICES=GPU-a"), "no variable on the command line: {argv}");
        assert_eq!(Runtime::detect("none", Vec::new()), Ok(None));
        // Issue 40, point 2: an AMD GPU goes in as its files, with their groups, and no NVIDIA flag.
        let amd = Passthrough::Files {
            files: vec!["/dev/kfd".into(), "/dev/dri/renderD129".into()],
            groups: vec![44, 109],
            rocr: Some("0".into()),
        };
        let mut on_amd = Launch { env: vec![("ROCR_VISIBLE_DEVICES".into(), "1".into())], ..launch.clone() };
        crate::node::container_env::number_inside(&mut on_amd, &amd);
        let argv = no_cdi.wrap(&on_amd, &ContainerJob { passthrough: &amd, ..c }).join(" ");
        for want in [
            "--device /dev/kfd --device /dev/dri/renderD129 --group-add 44 --group-add 109",
            "-e ROCR_VISIBLE_DEVICES=0",
        ] {
            assert!(argv.contains(want), "{want:?} in {argv}");
        }
        assert!(!argv.contains("NVIDIA_VISIBLE_DEVICES") && !argv.contains("nvidia.com/gpu"), "{argv}");
    }

    #[test]
    fn container_args_that_undo_the_confinement_are_refused_naming_the_flag() {
        for (args, bad) in [
            (vec!["--privileged"], Some("--privileged")),
            (vec!["--runtime=runc", "--cap-add=SYS_ADMIN"], Some("--cap-add")),
            (vec!["--security-opt=seccomp=unconfined"], Some("--security-opt")),
            (vec!["--userns=host"], Some("--userns")),
            (vec!["-v", "/:/host"], Some("-v")),
            (vec!["--device=/dev/mem"], Some("--device")),
            (vec!["--runtime=runc", "--ulimit=nofile=1024:1024"], None),
        ] {
            let args: Vec<String> = args.into_iter().map(String::from).collect();
            match (Runtime::detect("none", args.clone()), bad) {
                (Ok(None), None) => {}
                (Err(why), Some(flag)) => assert!(why.contains(flag) && why.contains("undo"), "{why}"),
                (got, want) => panic!("{args:?}: {got:?}, wanted {want:?}"),
            }
        }
    }

    /// Standard error of podman 4.3 with runc on these development machines (recorded).
    const RLIMIT: &str = "Error: runc: runc create failed: unable to start container process: error during container init: error setting rlimits for ready process: error setting rlimit type 7: operation not permitted: OCI permission denied\n";
    const WORKS: &str = "Error: runc: runc create failed: unable to start container process: exec: \"/gpool-probe\": stat /gpool-probe: no such file or directory: OCI runtime attempted to invoke a command that was not found\n";

    #[test]
    fn a_probe_run_names_what_is_wrong_and_the_flag_that_fixes_it() {
        assert_eq!(diagnose(Some(127), WORKS), Ok(()), "the program is missing, so the runtime works");
        let e = diagnose(Some(126), RLIMIT).expect_err("refused");
        assert!(e.contains("exited with 126") && e.contains("--ulimit=nofile=1024:1024"), "{e}");
        let crun = "Error: crun: cannot set cgroup: the cgroup layout is hybrid: OCI runtime error";
        assert!(diagnose(Some(126), crun).expect_err("crun").contains("--runtime=runc"));
        let other = diagnose(Some(125), "Error: short-name resolution\n").expect_err("other");
        assert!(other.contains("short-name resolution"), "{other}");
    }
}
