//! `gpool local-node create|delete POOL NODE`: the `local` provider of
//! elastic node pools (docs/cost.md). The control plane runs it exactly as
//! it runs an operator's `command` provider, with the same environment
//! (`GPOOL_SERVER`, `GPOOL_TOKEN`, `GPOOL_GPUS`, …); `create` starts a real
//! `gpool agent --simulate-gpus` in the background on this machine and
//! returns, `delete` stops it. Each node lives in
//! `$GPOOL_PROVIDER_DIR/NODE` (its pid, log and agent data).

use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub(crate) enum LocalNodeCommand {
    /// Start an agent for NODE of POOL in the background.
    Create { pool: String, node: String },
    /// Stop NODE's agent (SIGTERM, then SIGKILL after 10 s) and remove its directory.
    Delete { pool: String, node: String },
}

fn env(name: &str) -> anyhow::Result<String> {
    std::env::var(name).with_context(|| format!("{name} is not set: gpool local-node is run by the control plane for a pool with `provider: {{local: {{}}}}`"))
}

fn node_dir(node: &str) -> anyhow::Result<PathBuf> {
    if node.is_empty() || !node.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        bail!("node name {node:?}: letters, digits, - and _ only");
    }
    Ok(PathBuf::from(env("GPOOL_PROVIDER_DIR")?).join(node))
}

pub(crate) fn run(cmd: LocalNodeCommand) -> anyhow::Result<()> {
    match cmd {
        LocalNodeCommand::Create { pool, node } => create(&pool, &node),
        LocalNodeCommand::Delete { node, .. } => delete(&node),
    }
}

fn create(pool: &str, node: &str) -> anyhow::Result<()> {
    let dir = node_dir(node)?;
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let gpus: u32 = env("GPOOL_GPUS")?.parse().context("GPOOL_GPUS")?;
    let model = env("GPOOL_GPU_MODEL")?;
    let log = std::fs::File::create(dir.join("agent.log")).context("agent.log")?;
    let exe = std::env::current_exe().context("the path of this gpool binary")?;
    let mut agent = Command::new(exe);
    agent
        .arg("agent")
        .args(["--server", &env("GPOOL_SERVER")?])
        .args(["--node-name", node, "--pool", pool])
        .args(["--cpus", &env("GPOOL_CPUS")?, "--memory-gb", &env("GPOOL_MEMORY_GB")?])
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(["--sample-interval", "1s"]);
    // A pool without GPUs gets a CPU-only agent (it finds no GPU and says so in its log).
    if gpus > 0 {
        agent.args(["--simulate-gpus", &format!("{gpus}x{model}")]);
    }
    for l in env("GPOOL_LABELS").unwrap_or_default().split(',').filter(|l| !l.is_empty()) {
        agent.args(["--label", l]);
    }
    let child = agent
        .env("GPOOL_TOKEN", env("GPOOL_TOKEN")?)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .context("cannot start gpool agent")?;
    std::fs::write(dir.join("pid"), child.id().to_string()).context("pid file")?;
    println!("started gpool agent for node {node} of pool {pool} (pid {})", child.id());
    Ok(())
}

fn delete(node: &str) -> anyhow::Result<()> {
    let dir = node_dir(node)?;
    let Ok(text) = std::fs::read_to_string(dir.join("pid")) else {
        println!("node {node}: no agent was started here; nothing to stop");
        let _ = std::fs::remove_dir_all(&dir);
        return Ok(());
    };
    let pid: i32 = text.trim().parse().context("pid file")?;
    let alive = || std::path::Path::new(&format!("/proc/{pid}")).exists() && !zombie(pid);
    if let Some(p) = rustix::process::Pid::from_raw(pid) {
        let _ = rustix::process::kill_process_group(p, rustix::process::Signal::TERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if alive() {
            let _ = rustix::process::kill_process_group(p, rustix::process::Signal::KILL);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!("stopped the agent of node {node} (pid {pid})");
    Ok(())
}

/// Whether a process has exited and waits for its parent (the control plane, which never waits for it).
fn zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.starts_with('Z')))
        .unwrap_or(false)
}
