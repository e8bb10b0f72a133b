//! Control groups: the kernel enforces what a replica was allocated.
//!
//! Each replica gets a group of its own under the agent's own group, in each
//! cgroup v1 controller the host mounts (the layout of these development
//! machines and of many clusters: v1 controllers, a v2 hierarchy beside
//! them with no controller of its own):
//! - `memory`: `memory.limit_in_bytes` from the request; the kernel kills a
//!   job over it, and `memory.oom_control`'s `oom_kill` count tells the
//!   shim that the kill was the kernel's, so the job is reported as out of
//!   memory.
//! - `cpu`: a CFS quota of the requested CPUs (`cpu.cfs_quota_us`).
//! - `pids`: at most [`PIDS_MAX`] tasks (a fork bomb stops there).
//! - `devices`: the node's GPUs the replica was not given are denied
//!   (`c 195:N`, NVIDIA's major number and the GPU's minor number, which is
//!   its index): opening `/dev/nvidiaN` of another GPU fails with EPERM,
//!   whatever `CUDA_VISIBLE_DEVICES` says.
//!
//! The job joins its groups before it runs anything: the shim starts it
//! through a small `sh` that writes its own pid into each group's
//! `cgroup.procs` and then `exec`s the job. When the job ends, the shim
//! kills whatever is left in the groups (processes that left the process
//! group too) and removes them.
//!
//! A host with only cgroup v2 controllers is detected and said at start:
//! confinement is not applied there yet (v2's device control needs a BPF
//! program, and v2 forbids processes in inner groups, so the agent would
//! have to move itself into a leaf first). Neither is it applied to an agent
//! that is not root, nor with `--cgroups off`.

use std::path::{Path, PathBuf};

use crate::protocol::Confine;

/// NVIDIA's character-device major number (`/dev/nvidia0` is 195:0).
pub const NVIDIA_MAJOR: u32 = 195;
/// The most tasks a replica may have.
pub const PIDS_MAX: u64 = 32_768;
/// The CFS period the CPU quota is a share of.
const CFS_PERIOD_US: u64 = 100_000;

/// Where this agent makes replicas' groups: per v1 controller, the
/// agent's own group's directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub memory: PathBuf,
    pub cpu: Option<PathBuf>,
    pub pids: Option<PathBuf>,
    pub devices: Option<PathBuf>,
}

/// Finds the cgroup v1 controllers and this process's groups in them, from
/// `/proc/self/mounts` and `/proc/self/cgroup`; `Err` says why there is no
/// usable layout.
pub fn detect() -> Result<Layout, String> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").map_err(|e| format!("read /proc/self/mounts: {e}"))?;
    let own = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| format!("read /proc/self/cgroup: {e}"))?;
    layout_from(&mounts, &own)
}

/// [`detect`] on given file contents.
pub fn layout_from(mounts: &str, own: &str) -> Result<Layout, String> {
    let mount_of = |controller: &str| -> Option<PathBuf> {
        mounts.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 4 && f[2] == "cgroup" && f[3].split(',').any(|o| o == controller)).then(|| PathBuf::from(f[1]))
        })
    };
    let own_path = |controller: &str| -> Option<String> {
        own.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, list, path) = (parts.next()?, parts.next()?, parts.next()?);
            list.split(',').any(|c| c == controller).then(|| path.to_string())
        })
    };
    let dir = |controller: &str| -> Option<PathBuf> {
        let m = mount_of(controller)?;
        let p = own_path(controller)?;
        Some(m.join(p.trim_start_matches('/')))
    };
    let Some(memory) = dir("memory") else {
        let v2 = mounts.lines().any(|l| l.split_whitespace().nth(2) == Some("cgroup2"));
        return Err(if v2 {
            "this host has cgroup v2 controllers only, which gpool does not confine jobs with yet".into()
        } else {
            "this host mounts no cgroup memory controller".into()
        });
    };
    Ok(Layout { memory, cpu: dir("cpu"), pids: dir("pids"), devices: dir("devices") })
}

impl Layout {
    /// What a replica's groups will enforce.
    pub fn confine(&self, name: String, cpus_milli: u64, memory_mb: u64, deny_gpu_minors: Vec<u32>) -> Confine {
        Confine {
            name,
            memory: self.memory.clone(),
            cpu: self.cpu.clone(),
            pids: self.pids.clone(),
            devices: self.devices.clone(),
            cpus_milli,
            memory_bytes: memory_mb.saturating_mul(1024 * 1024),
            deny_gpu_minors,
        }
    }

    /// Which controllers it enforces, for the agent's start-up line.
    pub fn describe(&self) -> String {
        let mut c = vec!["memory"];
        c.extend(self.cpu.as_ref().map(|_| "cpu"));
        c.extend(self.pids.as_ref().map(|_| "pids"));
        c.extend(self.devices.as_ref().map(|_| "devices"));
        format!("cgroup v1 confines each job ({})", c.join(", "))
    }
}

/// A replica's groups, made by its shim.
pub struct Groups {
    dirs: Vec<PathBuf>,
    memory: PathBuf,
}

fn write(dir: &Path, file: &str, value: &str) -> std::io::Result<()> {
    std::fs::write(dir.join(file), value)
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: write {value:?}: {e}", dir.join(file).display())))
}

impl Confine {
    /// Makes the groups and sets their limits.
    pub fn create(&self) -> std::io::Result<Groups> {
        let under = |base: &Path| base.join("gpool").join(&self.name);
        let memory = under(&self.memory);
        let mut dirs = Vec::new();
        for base in
            [Some(&self.memory), self.cpu.as_ref(), self.pids.as_ref(), self.devices.as_ref()].into_iter().flatten()
        {
            let d = under(base);
            std::fs::create_dir_all(&d)
                .map_err(|e| std::io::Error::new(e.kind(), format!("mkdir {}: {e}", d.display())))?;
            dirs.push(d);
        }
        let groups = Groups { dirs, memory: memory.clone() };
        if self.memory_bytes > 0 {
            write(&memory, "memory.limit_in_bytes", &self.memory_bytes.to_string())?;
            // No swap beyond the limit where the kernel accounts it.
            let _ = write(&memory, "memory.memsw.limit_in_bytes", &self.memory_bytes.to_string());
        }
        if let Some(cpu) = &self.cpu
            && self.cpus_milli > 0
        {
            let d = under(cpu);
            write(&d, "cpu.cfs_period_us", &CFS_PERIOD_US.to_string())?;
            write(&d, "cpu.cfs_quota_us", &(self.cpus_milli * CFS_PERIOD_US / 1000).max(1000).to_string())?;
        }
        if let Some(pids) = &self.pids {
            write(&under(pids), "pids.max", &PIDS_MAX.to_string())?;
        }
        if let Some(devices) = &self.devices {
            let d = under(devices);
            for minor in &self.deny_gpu_minors {
                write(&d, "devices.deny", &format!("c {NVIDIA_MAJOR}:{minor} rwm"))?;
            }
        }
        Ok(groups)
    }
}

impl Groups {
    /// The command that runs `argv` inside these groups: a shell joins each
    /// (its own pid into `cgroup.procs`) and `exec`s it.
    pub fn wrap(&self, argv: &[String]) -> Vec<String> {
        let mut w = vec![
            "sh".to_string(),
            "-c".to_string(),
            "while [ \"$1\" != -- ]; do echo $$ > \"$1\" || { echo \"gpool: cannot join the control group $1\" >&2; \
             exit 126; }; shift; done; shift; exec \"$@\""
                .to_string(),
            "gpool-cgroup".to_string(),
        ];
        w.extend(self.dirs.iter().map(|d| d.join("cgroup.procs").display().to_string()));
        w.push("--".into());
        w.extend(argv.iter().cloned());
        w
    }

    /// How many times the kernel killed a task of the group for memory.
    pub fn oom_kills(&self) -> u64 {
        std::fs::read_to_string(self.memory.join("memory.oom_control"))
            .ok()
            .and_then(|t| t.lines().find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok()))
            .unwrap_or(0)
    }

    /// The memory limit, in MiB, for messages.
    pub fn memory_limit_mb(&self) -> Option<u64> {
        let t = std::fs::read_to_string(self.memory.join("memory.limit_in_bytes")).ok()?;
        Some(t.trim().parse::<u64>().ok()? / (1024 * 1024))
    }

    /// Kills every task left in the groups, then removes them.
    pub fn kill_all_and_remove(self) {
        for _ in 0..50 {
            let mut left = 0;
            for d in &self.dirs {
                let procs = std::fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default();
                for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                    left += 1;
                    if let Some(p) = rustix::process::Pid::from_raw(pid) {
                        let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
                    }
                }
            }
            if left == 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        for d in &self.dirs {
            let _ = std::fs::remove_dir(d);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTS: &str = "\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup /sys/fs/cgroup/devices cgroup rw,relatime,devices 0 0
cgroup /sys/fs/cgroup/pids cgroup rw,relatime,pids 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
";
    const OWN: &str = "8:pids:/\n5:devices:/\n4:memory:/process_api/c2\n1:cpu:/\n0::/\n";

    #[test]
    fn the_hybrid_layout_of_these_machines_is_found() {
        let l = layout_from(MOUNTS, OWN).expect("a layout");
        assert_eq!(l.memory, PathBuf::from("/sys/fs/cgroup/memory/process_api/c2"));
        assert_eq!(l.devices, Some(PathBuf::from("/sys/fs/cgroup/devices")));
        assert_eq!(l.cpu, Some(PathBuf::from("/sys/fs/cgroup/cpu")));
        assert!(l.describe().contains("memory, cpu, pids, devices"));
    }

    #[test]
    fn a_v2_only_host_is_named_as_such() {
        let mounts = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid 0 0\n";
        let e = layout_from(mounts, "0::/user.slice\n").expect_err("no v1 memory");
        assert!(e.contains("cgroup v2"), "{e}");
    }

    #[test]
    fn a_job_joins_its_groups_before_it_runs() {
        let g = Groups {
            dirs: vec!["/cg/memory/gpool/x".into(), "/cg/devices/gpool/x".into()],
            memory: "/cg/memory/gpool/x".into(),
        };
        let w = g.wrap(&["python3".into(), "train.py".into()]);
        assert_eq!(&w[..2], ["sh", "-c"]);
        assert_eq!(
            &w[3..],
            [
                "gpool-cgroup",
                "/cg/memory/gpool/x/cgroup.procs",
                "/cg/devices/gpool/x/cgroup.procs",
                "--",
                "python3",
                "train.py"
            ]
        );
    }
}
