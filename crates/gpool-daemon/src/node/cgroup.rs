//! Control groups: the kernel enforces what a replica was allocated.
//!
//! Each replica gets a group of its own, on either hierarchy a host may have
//! ([`Hierarchy`]):
//! - **cgroup v1** (these development machines, and many clusters: v1
//!   controllers, a v2 hierarchy beside them with none of its own): a group
//!   under the agent's own group in each controller:
//!   - `memory`: `memory.limit_in_bytes` from the request; the kernel kills
//!     a job over it, and `memory.oom_control`'s `oom_kill` count tells the
//!     shim that the kill was the kernel's, so the job is reported as out of
//!     memory.
//!   - `cpu`: a CFS quota of the requested CPUs (`cpu.cfs_quota_us`).
//!   - `pids`: at most [`PIDS_MAX`] tasks (a fork bomb stops there).
//!   - `devices`: `devices.deny` of the device files of the node's GPUs and
//!     MIG instances the replica was not given (`devices.rs`): opening
//!     `/dev/nvidiaN` of another GPU fails with EPERM, whatever
//!     `CUDA_VISIBLE_DEVICES` says.
//! - **cgroup v2** (current distributions): one group under `gpool/` beside
//!   the agent's: `memory.max` (and no swap), `cpu.max`, `pids.max`,
//!   `memory.events`' `oom_kill`, and for devices a BPF program attached to
//!   the group (`gpool-bpf`) that denies the same files. v2 lets no process
//!   live in a group that passes controllers down, so an agent that is not
//!   in the root group first moves its group's processes into a leaf
//!   (`agent/`; an agent started there uses the group above). Under systemd
//!   its unit needs `Delegate=yes` and `DelegateSubgroup=agent` (systemd
//!   254+), so that a restarted agent starts in the leaf. A controller
//!   the hierarchy does not pass down (on a hybrid host, one bound to v1)
//!   is not enforced, and the agent says so at start.
//!
//! The job joins its group(s) before it runs anything: the shim's hand-over
//! step (`handover.rs`) writes its own pid into each group's `cgroup.procs`
//! before it drops to the job's account and `exec`s the job. When the job ends, the shim
//! kills whatever is left in the groups (processes that left the process
//! group too; v2's `cgroup.kill` at once) and removes them.
//!
//! Confinement needs root; `--cgroups off` turns it off, `--cgroups v1|v2`
//! picks a hierarchy where a host has both.

use std::path::{Path, PathBuf};

use crate::protocol::Confine;
pub use crate::protocol::Hierarchy;

/// The most tasks a replica may have.
pub const PIDS_MAX: u64 = 32_768;
/// The CFS period the CPU quota is a share of.
const CFS_PERIOD_US: u64 = 100_000;

/// Which hierarchy a node confines jobs with (`--cgroups`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    #[default]
    Off,
    /// v1 where the host mounts a v1 memory controller, else v2.
    Auto,
    V1,
    V2,
}

impl Mode {
    pub fn parse(s: &str) -> Result<Mode, String> {
        match s {
            "off" => Ok(Mode::Off),
            "auto" => Ok(Mode::Auto),
            "v1" => Ok(Mode::V1),
            "v2" => Ok(Mode::V2),
            other => Err(format!("{other:?} is not auto, off, v1 or v2")),
        }
    }
}

/// Finds the hierarchy `mode` asks for, from `/proc/self/mounts` and
/// `/proc/self/cgroup`, and readies it (v2: the controllers passed down to
/// `gpool/`); `Err` says why there is none.
pub fn detect(mode: Mode) -> Result<Hierarchy, String> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").map_err(|e| format!("read /proc/self/mounts: {e}"))?;
    let own = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| format!("read /proc/self/cgroup: {e}"))?;
    match mode {
        Mode::Off => Err("--cgroups off".into()),
        Mode::V1 => v1_layout(&mounts, &own),
        Mode::V2 => prepare_v2(&v2_group(&mounts, &own)?),
        Mode::Auto => v1_layout(&mounts, &own).or_else(|v1| match v2_group(&mounts, &own) {
            Ok(g) => prepare_v2(&g),
            Err(v2) => Err(format!("{v1}, and {v2}")),
        }),
    }
}

/// The v1 controllers' directories of this process's groups.
pub fn v1_layout(mounts: &str, own: &str) -> Result<Hierarchy, String> {
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
    let memory = dir("memory").ok_or("this host mounts no cgroup v1 memory controller")?;
    Ok(Hierarchy::V1 { memory, cpu: dir("cpu"), pids: dir("pids"), devices: dir("devices") })
}

/// This process's v2 group: (the hierarchy's mount, the group's directory).
pub fn v2_group(mounts: &str, own: &str) -> Result<(PathBuf, PathBuf), String> {
    let mount = mounts
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 3 && f[2] == "cgroup2").then(|| PathBuf::from(f[1]))
        })
        .ok_or("this host mounts no cgroup v2 hierarchy")?;
    let path = own.lines().find_map(|l| l.strip_prefix("0::")).ok_or("this process has no cgroup v2 group")?;
    let dir = mount.join(path.trim().trim_start_matches('/'));
    Ok((mount, dir))
}

/// The v2 controllers gpool uses.
const V2_CONTROLLERS: [&str; 3] = ["memory", "cpu", "pids"];

/// Readies a v2 hierarchy: replicas' groups go in `gpool/` beside this
/// process's group (in it, at the root), and each controller gpool uses
/// that the group has is passed down to them.
fn prepare_v2((mount, own): &(PathBuf, PathBuf)) -> Result<Hierarchy, String> {
    let io = |what: &str, p: &Path, e: std::io::Error| format!("{what} {}: {e}", p.display());
    // Already in the leaf (a restart, or systemd's `DelegateSubgroup=agent`):
    // the group above it is gpool's.
    let own = match own.parent() {
        Some(up) if own != mount && own.file_name().is_some_and(|n| n == "agent") => up.to_path_buf(),
        _ => own.clone(),
    };
    let own = &own;
    let have = std::fs::read_to_string(own.join("cgroup.controllers"))
        .map_err(|e| io("read", &own.join("cgroup.controllers"), e))?;
    let wanted: Vec<&str> = V2_CONTROLLERS.into_iter().filter(|c| have.split_whitespace().any(|h| h == *c)).collect();
    if own != mount && !wanted.is_empty() {
        // No processes where controllers pass down: move ours into a leaf.
        let leaf = own.join("agent");
        std::fs::create_dir_all(&leaf).map_err(|e| io("mkdir", &leaf, e))?;
        let procs = std::fs::read_to_string(own.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines() {
            // A process that ended meanwhile is no matter.
            let _ = std::fs::write(leaf.join("cgroup.procs"), pid);
        }
    }
    let parent = own.join("gpool");
    // One write enables them all (the kernel takes a list), or none.
    let enable: Vec<String> = wanted.iter().map(|c| format!("+{c}")).collect();
    let enable = enable.join(" ");
    let pass_down = |dir: &Path| -> Result<(), String> {
        if enable.is_empty() {
            return Ok(());
        }
        std::fs::write(dir.join("cgroup.subtree_control"), &enable)
            .map_err(|e| io(&format!("enable {enable} in"), &dir.join("cgroup.subtree_control"), e))
    };
    pass_down(own)?;
    std::fs::create_dir_all(&parent).map_err(|e| io("mkdir", &parent, e))?;
    pass_down(&parent)?;
    let has = |c: &str| wanted.contains(&c);
    Ok(Hierarchy::V2 { parent, memory: has("memory"), cpu: has("cpu"), pids: has("pids") })
}

impl Hierarchy {
    /// What a replica's groups will enforce.
    pub fn confine(&self, name: String, cpus_milli: u64, memory_mb: u64, deny: Vec<(u32, u32)>) -> Confine {
        Confine { name, hierarchy: self.clone(), cpus_milli, memory_bytes: memory_mb.saturating_mul(1024 * 1024), deny }
    }

    /// What it enforces, for the agent's start-up line.
    pub fn describe(&self) -> String {
        match self {
            Hierarchy::V1 { cpu, pids, devices, .. } => {
                let mut c = vec!["memory"];
                c.extend(cpu.as_ref().map(|_| "cpu"));
                c.extend(pids.as_ref().map(|_| "pids"));
                c.extend(devices.as_ref().map(|_| "devices"));
                format!("cgroup v1 confines each job ({})", c.join(", "))
            }
            Hierarchy::V2 { parent, memory, cpu, pids } => {
                let mut on = Vec::new();
                let mut off = Vec::new();
                for (c, has) in [("memory", memory), ("cpu", cpu), ("pids", pids)] {
                    if *has { on.push(c) } else { off.push(c) }
                }
                on.push("devices");
                let mut line = format!("cgroup v2 confines each job in {} ({})", parent.display(), on.join(", "));
                if !off.is_empty() {
                    line.push_str(&format!(
                        "; not enforced: {} (not available there: bound to a v1 hierarchy, or not delegated to gpool)",
                        off.join(", ")
                    ));
                }
                line
            }
        }
    }
}

/// A replica's groups, made by its shim.
pub struct Groups {
    dirs: Vec<PathBuf>,
    /// The group whose memory files count its OOM kills and hold its limit.
    memory: PathBuf,
    v2: bool,
}

fn write(dir: &Path, file: &str, value: &str) -> std::io::Result<()> {
    std::fs::write(dir.join(file), value)
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: write {value:?}: {e}", dir.join(file).display())))
}

fn mkdir(d: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(d).map_err(|e| std::io::Error::new(e.kind(), format!("mkdir {}: {e}", d.display())))
}

impl Confine {
    /// Makes the groups and sets their limits.
    pub fn create(&self) -> std::io::Result<Groups> {
        match &self.hierarchy {
            Hierarchy::V1 { memory, cpu, pids, devices } => {
                let under = |base: &Path| base.join("gpool").join(&self.name);
                let mut dirs = Vec::new();
                for base in [Some(memory), cpu.as_ref(), pids.as_ref(), devices.as_ref()].into_iter().flatten() {
                    mkdir(&under(base))?;
                    dirs.push(under(base));
                }
                let memory = under(memory);
                if self.memory_bytes > 0 {
                    write(&memory, "memory.limit_in_bytes", &self.memory_bytes.to_string())?;
                    // No swap beyond the limit where the kernel accounts it.
                    let _ = write(&memory, "memory.memsw.limit_in_bytes", &self.memory_bytes.to_string());
                }
                if let Some(cpu) = cpu
                    && self.cpus_milli > 0
                {
                    let d = under(cpu);
                    write(&d, "cpu.cfs_period_us", &CFS_PERIOD_US.to_string())?;
                    write(&d, "cpu.cfs_quota_us", &self.cpu_quota_us().to_string())?;
                }
                if let Some(pids) = pids {
                    write(&under(pids), "pids.max", &PIDS_MAX.to_string())?;
                }
                if let Some(devices) = devices {
                    let d = under(devices);
                    for (major, minor) in &self.deny {
                        write(&d, "devices.deny", &format!("c {major}:{minor} rwm"))?;
                    }
                }
                Ok(Groups { dirs, memory, v2: false })
            }
            Hierarchy::V2 { parent, memory, cpu, pids } => {
                let d = parent.join(&self.name);
                mkdir(&d)?;
                let groups = Groups { dirs: vec![d.clone()], memory: d.clone(), v2: true };
                if *memory && self.memory_bytes > 0 {
                    write(&d, "memory.max", &self.memory_bytes.to_string())?;
                    let _ = write(&d, "memory.swap.max", "0");
                }
                if *cpu && self.cpus_milli > 0 {
                    write(&d, "cpu.max", &format!("{} {CFS_PERIOD_US}", self.cpu_quota_us()))?;
                }
                if *pids {
                    write(&d, "pids.max", &PIDS_MAX.to_string())?;
                }
                if !self.deny.is_empty() {
                    let filter = gpool_bpf::DeviceFilter {
                        deny: self.deny.iter().map(|(a, b)| (gpool_bpf::DeviceKind::Char, *a, *b)).collect(),
                    };
                    filter.attach(&d).map_err(std::io::Error::other)?;
                }
                Ok(groups)
            }
        }
    }

    fn cpu_quota_us(&self) -> u64 {
        (self.cpus_milli * CFS_PERIOD_US / 1000).max(1000)
    }
}

impl Groups {
    /// The `cgroup.procs` files a replica's first process joins (`handover.rs`).
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join("cgroup.procs")).collect()
    }

    /// How many times the kernel killed a task of the group for memory.
    pub fn oom_kills(&self) -> u64 {
        let file = if self.v2 { "memory.events" } else { "memory.oom_control" };
        std::fs::read_to_string(self.memory.join(file)).map_or(0, |t| oom_kills_in(&t))
    }

    /// The memory limit, in MiB, for messages.
    pub fn memory_limit_mb(&self) -> Option<u64> {
        let file = if self.v2 { "memory.max" } else { "memory.limit_in_bytes" };
        let t = std::fs::read_to_string(self.memory.join(file)).ok()?;
        Some(t.trim().parse::<u64>().ok()? / (1024 * 1024))
    }

    /// Kills every task left in the groups, then removes them.
    pub fn kill_all_and_remove(self) {
        if self.v2 {
            // Every task at once, those forking meanwhile too (Linux 5.14+).
            for d in &self.dirs {
                let _ = std::fs::write(d.join("cgroup.kill"), "1");
            }
        }
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

/// The `oom_kill` count of v1's `memory.oom_control` or v2's `memory.events`.
fn oom_kills_in(text: &str) -> u64 {
    text.lines().find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok()).unwrap_or(0)
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
        let l = v1_layout(MOUNTS, OWN).expect("a layout");
        let Hierarchy::V1 { memory, cpu, devices, .. } = &l else { panic!("v1: {l:?}") };
        assert_eq!(memory, &PathBuf::from("/sys/fs/cgroup/memory/process_api/c2"));
        assert_eq!(devices, &Some(PathBuf::from("/sys/fs/cgroup/devices")));
        assert_eq!(cpu, &Some(PathBuf::from("/sys/fs/cgroup/cpu")));
        assert!(l.describe().contains("memory, cpu, pids, devices"));
        // Its v2 hierarchy is found too, for --cgroups v2.
        let (mount, own) = v2_group(MOUNTS, OWN).expect("v2 beside");
        assert_eq!((mount.as_path(), own.as_path()), (Path::new("/sys/fs/cgroup/unified"), mount.as_path()));
    }

    #[test]
    fn a_v2_only_host_has_no_v1_layout_and_its_own_group_is_found() {
        let mounts = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid 0 0\n";
        let e = v1_layout(mounts, "0::/system.slice/gpool-agent.service\n").expect_err("no v1 memory");
        assert!(e.contains("v1 memory"), "{e}");
        let (mount, own) = v2_group(mounts, "0::/system.slice/gpool-agent.service\n").expect("v2");
        assert_eq!(mount, PathBuf::from("/sys/fs/cgroup"));
        assert_eq!(own, PathBuf::from("/sys/fs/cgroup/system.slice/gpool-agent.service"));
        assert!(v2_group("tmpfs /tmp tmpfs rw 0 0\n", "").is_err());
    }

    #[test]
    fn v2_says_which_controllers_it_cannot_enforce() {
        let full = Hierarchy::V2 { parent: "/cg/gpool".into(), memory: true, cpu: true, pids: true };
        assert_eq!(full.describe(), "cgroup v2 confines each job in /cg/gpool (memory, cpu, pids, devices)");
        let hybrid = Hierarchy::V2 { parent: "/cg/gpool".into(), memory: false, cpu: false, pids: true };
        let line = hybrid.describe();
        assert!(line.contains("(pids, devices)") && line.contains("not enforced: memory, cpu"), "{line}");
    }

    #[test]
    fn oom_kills_are_counted_in_either_hierarchys_file() {
        let v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n";
        let v2 = "low 0\nhigh 0\nmax 5\noom 1\noom_kill 1\noom_group_kill 0\n";
        assert_eq!((oom_kills_in(v1), oom_kills_in(v2), oom_kills_in("")), (2, 1, 0));
    }

    #[test]
    fn modes_parse() {
        assert_eq!(Mode::parse("v2"), Ok(Mode::V2));
        assert!(Mode::parse("yes").expect_err("bad").contains("auto, off, v1 or v2"));
    }

    /// Issue 40, point 9: these machines are hybrid, so what gpool writes
    /// into a v2 hierarchy is checked against a directory laid out as one:
    /// the agent moved into a leaf, the controllers passed down, and each
    /// replica's limits.
    #[test]
    fn what_gpool_writes_into_a_v2_hierarchy() {
        let root = std::env::temp_dir().join(format!("gpool-cgv2-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let own = root.join("system.slice/gpool-agent.service");
        std::fs::create_dir_all(&own).expect("dirs");
        std::fs::write(own.join("cgroup.controllers"), "cpuset cpu io memory hugetlb pids rdma\n")
            .expect("controllers");
        std::fs::write(own.join("cgroup.procs"), "4242\n").expect("procs");
        let h = prepare_v2(&(root.clone(), own.clone())).expect("prepared");
        let read = |p: PathBuf| std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert_eq!(read(own.join("agent/cgroup.procs")), "4242", "the agent's process moves into a leaf");
        assert_eq!(read(own.join("cgroup.subtree_control")), "+memory +cpu +pids");
        assert_eq!(read(own.join("gpool/cgroup.subtree_control")), "+memory +cpu +pids");
        assert_eq!(h, Hierarchy::V2 { parent: own.join("gpool"), memory: true, cpu: true, pids: true });
        let groups = h.confine("job-7-1-0".into(), 1_500, 2_048, Vec::new()).create().expect("groups");
        let job = own.join("gpool/job-7-1-0");
        assert_eq!(read(job.join("memory.max")), (2_048u64 * 1024 * 1024).to_string());
        assert_eq!(read(job.join("memory.swap.max")), "0", "no swap beyond the limit");
        assert_eq!(read(job.join("cpu.max")), format!("150000 {CFS_PERIOD_US}"), "1.5 CPUs");
        assert_eq!(read(job.join("pids.max")), PIDS_MAX.to_string());
        assert_eq!(groups.procs_files(), [job.join("cgroup.procs")], "its first process joins this group");
        // A restarted agent, already in its leaf, finds the same parent.
        let again = prepare_v2(&(root.clone(), own.join("agent"))).expect("again");
        assert_eq!(again, h);
        // A group without controllers passed down enforces what it has, and says so.
        std::fs::write(own.join("cgroup.controllers"), "pids\n").expect("controllers");
        let pids_only = prepare_v2(&(root.clone(), own.clone())).expect("prepared");
        assert_eq!(pids_only, Hierarchy::V2 { parent: own.join("gpool"), memory: false, cpu: false, pids: true });
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_job_joins_each_of_its_groups() {
        let g = Groups {
            dirs: vec!["/cg/memory/gpool/x".into(), "/cg/devices/gpool/x".into()],
            memory: "/cg/memory/gpool/x".into(),
            v2: false,
        };
        assert_eq!(
            g.procs_files(),
            [PathBuf::from("/cg/memory/gpool/x/cgroup.procs"), PathBuf::from("/cg/devices/gpool/x/cgroup.procs")]
        );
    }
}
