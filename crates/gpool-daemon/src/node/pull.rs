//! A job's image is pulled by its shim before the command runs, as a step
//! of its own: the shim asks the runtime whether the image is here, and if
//! not pulls it, its output in `DIR/pull.log` (copied into the replica's
//! log after) and `DIR/pulling` saying since when. The sampler reads those
//! files into each report (`progress`), so `gpool show` says `pulling` with
//! the layers copied so far, and a pulling replica's GPUs are not counted
//! idle. During the pull the pull's process group is the replica's, so a
//! cancel or preemption stops the pull; a pull that fails ends the replica
//! with exit code 125 and the runtime's own last words.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::protocol::PullSteps;

/// Present while the pull runs: `IMAGE\nSTARTED_MS\n`.
pub const PULLING: &str = "pulling";
/// The pull's output.
pub const PULL_LOG: &str = "pull.log";

/// How a pull ended, when the command must not run.
pub enum PullEnd {
    /// The runtime could not pull it: why.
    Failed(String),
    /// The pull was stopped by this signal (a cancel, a preemption).
    Signalled(i32),
}

/// What the sampler says of a replica that is pulling, if it is.
pub fn progress(dir: &Path, now_ms: i64) -> Option<String> {
    let marker = std::fs::read_to_string(dir.join(PULLING)).ok()?;
    let mut lines = marker.lines();
    let image = lines.next().unwrap_or("");
    let since: i64 = lines.next().and_then(|l| l.trim().parse().ok()).unwrap_or(now_ms);
    let log = std::fs::read_to_string(dir.join(PULL_LOG)).unwrap_or_default();
    Some(describe(image, &log, (now_ms - since).max(0) / 1000))
}

/// `pulling IMAGE for 12s: 3 of 5 layers copied` from the runtime's output.
/// Podman and Docker print a line per layer (`Copying blob sha256:… done`,
/// `a1b2c3: Pull complete`); without a terminal neither prints byte counts.
pub fn describe(image: &str, log: &str, secs: i64) -> String {
    let mut layers: Vec<(&str, bool)> = Vec::new();
    // Podman without a terminal says "Copying blob X" as a layer begins, and
    // copies the config once every layer is in.
    let all_in = log.lines().any(|l| l.starts_with("Copying config") || l.starts_with("Writing manifest"));
    for line in log.lines().map(str::trim) {
        let (id, done) = if let Some(rest) = line.strip_prefix("Copying blob ") {
            let id = rest.split_whitespace().next().unwrap_or(rest);
            (id, all_in || rest.ends_with("done") || rest.contains("skipped"))
        } else if let Some((id, what)) = line.split_once(": ") {
            if !id.chars().all(|c| c.is_ascii_hexdigit()) || id.len() < 6 {
                continue;
            }
            (id, matches!(what, "Pull complete" | "Already exists"))
        } else {
            continue;
        };
        match layers.iter_mut().find(|(i, _)| *i == id) {
            Some(l) => l.1 |= done,
            None => layers.push((id, done)),
        }
    }
    let done = layers.iter().filter(|(_, d)| *d).count();
    if layers.is_empty() {
        format!("pulling {image} for {secs}s")
    } else {
        format!("pulling {image} for {secs}s: {done} of {} layers copied", layers.len())
    }
}

/// Runs the pull step in the shim. `Ok(())`: the image is here (pulled or
/// not); the command may run. `set_pid` records the pull's process group
/// as the replica's while it runs.
pub fn run(dir: &Path, steps: &PullSteps, stderr_log: &Path, set_pid: impl Fn(i32)) -> Result<(), PullEnd> {
    let quiet = |argv: &[String]| -> bool {
        argv.split_first().is_some_and(|(p, a)| {
            Command::new(p)
                .args(a)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
    };
    if quiet(&steps.exists) {
        return Ok(());
    }
    let now = crate::node::clock::wall_ms();
    let _ = std::fs::write(dir.join(PULLING), format!("{}\n{now}\n", steps.image));
    let log_path = dir.join(PULL_LOG);
    let result = (|| -> Result<std::process::ExitStatus, String> {
        let log = OpenOptions::new().create(true).append(true).open(&log_path).map_err(|e| e.to_string())?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        let (prog, args) = steps.pull.split_first().ok_or("no pull command")?;
        let mut child = std::os::unix::process::CommandExt::process_group(
            Command::new(prog).args(args).stdin(Stdio::null()).stdout(log).stderr(err),
            0,
        )
        .spawn()
        .map_err(|e| format!("cannot run {prog}: {e}"))?;
        set_pid(child.id() as i32);
        child.wait().map_err(|e| e.to_string())
    })();
    let _ = std::fs::remove_file(dir.join(PULLING));
    let output = std::fs::read_to_string(&log_path).unwrap_or_default();
    if let Ok(mut f) = OpenOptions::new().create(true).append(true).open(stderr_log) {
        let _ = writeln!(f, "== gpool: pulling {}", steps.image);
        let _ = f.write_all(output.as_bytes());
    }
    match result {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => match std::os::unix::process::ExitStatusExt::signal(&s) {
            Some(sig) => Err(PullEnd::Signalled(sig)),
            None => {
                let last = output.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
                Err(PullEnd::Failed(format!("could not pull image {}: {last}", steps.image)))
            }
        },
        Err(e) => Err(PullEnd::Failed(format!("could not pull image {}: {e}", steps.image))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Podman 4 without a terminal, and Docker, part way through (recorded form).
    const PODMAN: &str = "Trying to pull ghcr.io/org/model:1...\nGetting image source signatures\nCopying blob sha256:aa11 done\nCopying blob sha256:bb22\nCopying blob sha256:cc33 skipped: already exists\n";
    const DOCKER: &str = "1: Pulling from org/model\n5d9c2a1e0b7f: Already exists\n9f3e0c1d2a4b: Pulling fs layer\n7a8b9c0d1e2f: Pull complete\n";

    #[test]
    fn progress_counts_the_layers_copied() {
        assert_eq!(describe("m:1", PODMAN, 12), "pulling m:1 for 12s: 2 of 3 layers copied");
        assert_eq!(describe("m:1", DOCKER, 3), "pulling m:1 for 3s: 2 of 3 layers copied");
        assert_eq!(describe("m:1", "Trying to pull…\n", 0), "pulling m:1 for 0s");
        let finished = "Copying blob sha256:28a9\nCopying blob sha256:77ff\nCopying config sha256:a795\n";
        assert_eq!(describe("m:1", finished, 1), "pulling m:1 for 1s: 2 of 2 layers copied");
    }
}
