//! `gpool profile` on a node: for one replica, py-spy's stacks of its
//! Python process and its devices read every 100 ms, over the same window.
//!
//! py-spy (`pip install py-spy`) attaches with ptrace: the agent must run
//! as root, hold CAP_SYS_PTRACE, or run where `kernel.yama.ptrace_scope`
//! is 0 (a job is the shim's child, not py-spy's). Each way it can fail is
//! said in the capture's `error`, which `gpool profile` shows.

use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;
use std::time::Duration;

use gpool_api::agent::ProfileCapture;

use crate::node::sampler::{ReplicaEntry, SamplerCtl};
use crate::node::shim::{STATE, ShimState, read_json};

/// py-spy's sampling rate (its default): 500 samples in a 5 s window.
pub const RATE_HZ: u32 = 100;

/// What one capture may carry, so that it fits one report of the agent
/// protocol (4 MiB) with room to spare: the heaviest stacks up to 1 MiB,
/// and at most 2,000 device readings (evenly thinned).
pub const MAX_STACK_BYTES: usize = 1 << 20;
pub const MAX_READINGS: usize = 2_000;

/// The file that exists while a profile of the replica runs (in its run
/// directory), holding `seconds=N`: a job that wants kernel-level detail
/// checks it and runs the PyTorch profiler meanwhile (docs/profiling.md).
pub const REQUEST_FILE: &str = "profile-request";
/// The variable that names [`REQUEST_FILE`] to the job.
pub const REQUEST_ENV: &str = "GPOOL_PROFILE_REQUEST";

/// Names the py-spy binary: `GPOOL_PY_SPY`, else `py-spy` on `PATH`.
pub const PY_SPY_ENV: &str = "GPOOL_PY_SPY";

/// Records one replica's profile for `seconds` (blocks that long).
pub fn capture(
    node: &str,
    entry: Option<ReplicaEntry>,
    order: crate::protocol::ProfileOrder,
    sampler: Option<&Sender<SamplerCtl>>,
) -> ProfileCapture {
    let seconds = order.seconds;
    let Some(entry) = entry else {
        return failed(format!("the replica no longer runs on node {node}"));
    };
    let window = Duration::from_secs(u64::from(seconds));
    // The devices are read from the sampler thread while py-spy runs here.
    let readings = match sampler {
        Some(ctl) if !entry.devices.is_empty() => {
            let (tx, rx) = std::sync::mpsc::channel();
            let asked = ctl.send(SamplerCtl::Burst { devices: entry.devices.clone(), seconds: window, reply: tx });
            asked.ok().map(|()| rx)
        }
        _ => None,
    };
    // Removed when the window ends, whatever happens in it: a job that
    // records its own trace on request gets the whole window even when
    // py-spy fails at once.
    let posted = std::time::Instant::now();
    let request = Request::post(&entry.run_dir, seconds);
    let mut capture = ProfileCapture::default();
    match python_pid(&entry.run_dir) {
        Err(why) => capture.error = Some(why),
        Ok(pid) => {
            capture.pid = Some(pid);
            match record(node, pid, order, &entry.run_dir) {
                Ok(stacks) => capture.stacks = stacks,
                Err(why) => capture.error = Some(why),
            }
        }
    }
    if let Some(rx) = readings {
        // py-spy may have failed at once: the readings still cover the window.
        capture.samples = rx.recv_timeout(window + Duration::from_secs(10)).unwrap_or_default();
    }
    if let Some(left) = window.checked_sub(posted.elapsed()) {
        std::thread::sleep(left);
    }
    drop(request);
    bound(&mut capture);
    capture
}

/// Keeps a capture within [`MAX_STACK_BYTES`] and [`MAX_READINGS`].
fn bound(c: &mut ProfileCapture) {
    if c.samples.len() > MAX_READINGS {
        let every = c.samples.len().div_ceil(MAX_READINGS);
        c.samples = c.samples.iter().step_by(every).cloned().collect();
    }
    if c.stacks.len() > MAX_STACK_BYTES {
        let count = |l: &str| l.rsplit(' ').next().and_then(|n| n.trim().parse::<u64>().ok()).unwrap_or(0);
        let mut lines: Vec<&str> = c.stacks.lines().collect();
        lines.sort_by_key(|l| std::cmp::Reverse(count(l)));
        let mut kept = String::new();
        for l in lines {
            if kept.len() + l.len() + 1 > MAX_STACK_BYTES {
                break;
            }
            kept.push_str(l);
            kept.push('\n');
        }
        c.stacks = kept;
    }
}

/// The request file of a profile under way; removed when dropped.
struct Request(PathBuf);

impl Request {
    fn post(run_dir: &Path, seconds: u32) -> Option<Request> {
        use std::os::unix::fs::PermissionsExt;
        let path = run_dir.join(REQUEST_FILE);
        // Readable before it appears: a job running as its user reads it (the
        // agent's umask is 077), and one that saw it exist between the write
        // and a chmod would fail to open it (a race the multi-user test hit
        // under load). Written aside, opened up, then renamed into place.
        let aside = run_dir.join(format!(".{REQUEST_FILE}.tmp"));
        std::fs::write(&aside, format!("seconds={seconds}\n")).ok()?;
        let _ = std::fs::set_permissions(&aside, std::fs::Permissions::from_mode(0o644));
        std::fs::rename(&aside, &path).ok()?;
        Some(Request(path))
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn failed(why: String) -> ProfileCapture {
    ProfileCapture { error: Some(why), ..ProfileCapture::default() }
}

/// One process of a replica, as /proc shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcInfo {
    pub pid: u32,
    pub ppid: u32,
    /// The file name of the program it runs (`/proc/PID/exe`): a script
    /// run by its shebang shows its interpreter.
    pub exe: String,
    pub cmdline: String,
}

/// Launchers whose Python process only waits for the workers it starts.
const LAUNCHERS: &[&str] =
    &["torch.distributed.run", "torchrun", "torch.distributed.launch", "accelerate", "deepspeed"];

/// The replica's Python process to profile: the outermost one, or, when
/// that is a launcher (torchrun), its first worker (local rank 0).
pub fn pick_python(procs: &[ProcInfo]) -> Option<u32> {
    let is_python = |p: &&ProcInfo| p.exe.starts_with("python") || p.exe.starts_with("pypy");
    let python: Vec<&ProcInfo> = procs.iter().filter(is_python).collect();
    let outer = python.iter().filter(|p| !python.iter().any(|q| q.pid == p.ppid)).min_by_key(|p| p.pid)?;
    let launcher = LAUNCHERS.iter().any(|l| outer.cmdline.split([' ', '/']).any(|w| w == *l));
    if launcher && let Some(worker) = python.iter().filter(|p| p.ppid == outer.pid).min_by_key(|p| p.pid) {
        return Some(worker.pid);
    }
    Some(outer.pid)
}

/// The processes of the replica whose shim state is in `run_dir`: those of its shim's session.
fn replica_procs(run_dir: &Path) -> Result<Vec<ProcInfo>, String> {
    let st = read_json::<ShimState>(&run_dir.join(STATE)).ok_or("the replica's shim has not started it yet")?;
    let entries = std::fs::read_dir("/proc").map_err(|e| format!("cannot read /proc: {e}"))?;
    let procs = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let rest: Vec<&str> = stat.get(stat.rfind(')')? + 1..)?.split_whitespace().collect();
            let ppid: u32 = rest.get(1)?.parse().ok()?;
            let session: i32 = rest.get(3)?.parse().ok()?;
            if session != st.shim_pid || pid == st.shim_pid as u32 {
                return None;
            }
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            Some(ProcInfo {
                pid,
                ppid,
                exe: exe.file_name()?.to_string_lossy().into_owned(),
                cmdline: String::from_utf8_lossy(&cmdline).replace('\0', " ").trim().to_string(),
            })
        })
        .collect();
    Ok(procs)
}

fn python_pid(run_dir: &Path) -> Result<u32, String> {
    let procs = replica_procs(run_dir)?;
    pick_python(&procs).ok_or_else(|| {
        let names: Vec<&str> = procs.iter().map(|p| p.exe.as_str()).collect();
        format!(
            "no Python process in the replica (it runs {}): gpool profile samples Python stacks with py-spy",
            if names.is_empty() { "nothing any more".to_string() } else { names.join(", ") }
        )
    })
}

fn py_spy() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os(PY_SPY_ENV) {
        return Ok(PathBuf::from(p));
    }
    gpool_gpu::tool::on_path("py-spy").ok_or_else(|| {
        "py-spy is not installed on this node: `pip install py-spy` (or set GPOOL_PY_SPY to its path) \
         where the agent can run it"
            .to_string()
    })
}

/// Runs py-spy against `pid` for the order's seconds; its collapsed stacks.
/// Without native frames py-spy need not pause the process (`--nonblocking`).
fn record(node: &str, pid: u32, order: crate::protocol::ProfileOrder, dir: &Path) -> Result<String, String> {
    let seconds = order.seconds;
    let bin = py_spy()?;
    let out = dir.join(format!("profile-{pid}.txt"));
    let (pid_s, secs, rate, out_s) =
        (pid.to_string(), seconds.to_string(), RATE_HZ.to_string(), out.display().to_string());
    let args = ["record", "--pid", &pid_s, "--duration", &secs, "--rate", &rate, "--format", "raw", "--idle"];
    let mode = if order.native { "--native" } else { "--nonblocking" };
    let args: Vec<&str> = args.into_iter().chain(["--output", out_s.as_str(), mode]).collect();
    // Well within the control plane's grace period (profiles.rs), so that a
    // hung py-spy is reported as such, not as a silent node.
    let ran = gpool_gpu::tool::run(&bin, &args, Duration::from_secs(u64::from(seconds) + 15));
    let stacks = std::fs::read_to_string(&out);
    let _ = std::fs::remove_file(&out);
    match ran {
        Ok(_) => stacks.map_err(|e| format!("py-spy wrote no stacks to {out_s}: {e}")),
        Err(gpool_gpu::tool::ToolFailure::NotFound) => {
            Err(format!("py-spy is not at {} on node {node}: `pip install py-spy`", bin.display()))
        }
        Err(gpool_gpu::tool::ToolFailure::Spawn(e)) => Err(format!("cannot run {}: {e}", bin.display())),
        Err(gpool_gpu::tool::ToolFailure::Timeout) => Err(format!("py-spy did not finish {seconds} s after it began")),
        Err(gpool_gpu::tool::ToolFailure::Failed { code, status, message }) => {
            let said = gpool_gpu::tool::ToolFailure::exit_text(code, &status, &message);
            let lower = message.to_lowercase();
            if lower.contains("permission") || lower.contains("not permitted") || lower.contains("ptrace") {
                Err(format!(
                    "py-spy may not attach to process {pid} on node {node} ({said}): ptrace is refused; run the \
                     agent as root or with CAP_SYS_PTRACE, or set kernel.yama.ptrace_scope to 0"
                ))
            } else {
                Err(format!("py-spy failed on process {pid} on node {node} ({said})"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pid: u32, ppid: u32, exe: &str, cmdline: &str) -> ProcInfo {
        ProcInfo { pid, ppid, exe: exe.into(), cmdline: cmdline.into() }
    }

    #[test]
    fn the_outermost_python_process_is_profiled_and_a_launcher_gives_way_to_its_first_worker() {
        let cases: Vec<(&str, Vec<ProcInfo>, Option<u32>)> = vec![
            ("a script", vec![p(10, 1, "python3.11", "python3 train.py")], Some(10)),
            (
                "under a shell, with DataLoader workers",
                vec![
                    p(10, 1, "bash", "bash -c python train.py"),
                    p(11, 10, "python3.11", "python train.py"),
                    p(12, 11, "python3.11", "python train.py"),
                    p(13, 11, "python3.11", "python train.py"),
                ],
                Some(11),
            ),
            (
                "torchrun",
                vec![
                    p(20, 1, "python3.10", "/usr/bin/python3 /usr/local/bin/torchrun --nproc-per-node 2 train.py"),
                    p(22, 20, "python3.10", "/usr/bin/python3 -u train.py"),
                    p(21, 20, "python3.10", "/usr/bin/python3 -u train.py"),
                ],
                Some(21),
            ),
            (
                "python -m torch.distributed.run, no workers yet",
                vec![p(30, 1, "python3", "python -m torch.distributed.run t.py")],
                Some(30),
            ),
            ("no Python", vec![p(40, 1, "bash", "bash"), p(41, 40, "sleep", "sleep 60")], None),
            ("pypy", vec![p(50, 1, "pypy3", "pypy3 t.py")], Some(50)),
        ];
        for (what, procs, want) in cases {
            assert_eq!(pick_python(&procs), want, "{what}");
        }
    }

    #[test]
    fn a_capture_is_bounded_to_fit_one_report() {
        let samples = (0..6_000)
            .map(|i| gpool_api::agent::DeviceReading {
                t_ms: i,
                device: "GPU-0".into(),
                util_pct: 1.0,
                memory_used_mb: None,
            })
            .collect();
        let heavy = "<module> (t.py:1);hot (t.py:2) 999999\n";
        let filler: String = (0..40_000).map(|i| format!("<module> (t.py:1);f{i} (t.py:{i}) 1\n")).collect();
        let mut c = ProfileCapture { stacks: format!("{filler}{heavy}"), samples, ..Default::default() };
        bound(&mut c);
        assert_eq!(c.samples.len(), 2_000);
        assert_eq!((c.samples[0].t_ms, c.samples[1].t_ms), (0, 3), "evenly thinned");
        assert!(
            c.stacks.len() <= MAX_STACK_BYTES && c.stacks.starts_with("<module> (t.py:1);hot"),
            "the heaviest first"
        );
        let mut small = ProfileCapture { stacks: heavy.into(), ..Default::default() };
        bound(&mut small);
        assert_eq!(small.stacks, heavy, "a small capture is left alone");
    }

    #[test]
    fn a_replica_that_is_gone_is_said_so() {
        let c = capture("n1", None, crate::protocol::ProfileOrder { profile: 1, seconds: 1, native: false }, None);
        assert!(c.error.as_deref().is_some_and(|e| e.contains("no longer runs on node n1")), "{c:?}");
    }
}
