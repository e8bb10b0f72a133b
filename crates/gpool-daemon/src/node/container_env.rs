//! What a job's container is told: its variables, without the host's
//! paths and identity, in a root-only file where they fit one line each,
//! and its AMD GPUs numbered as the container sees them.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::node::devices::Passthrough;
use crate::protocol::Launch;

/// A job's AMD GPUs as its container numbers them: only its own are there,
/// from 0, so `ROCR_VISIBLE_DEVICES` (the host's driver indices outside)
/// counts from 0 inside.
pub fn number_inside(launch: &mut Launch, passthrough: &Passthrough) {
    if let Passthrough::Files { rocr: Some(rocr), .. } = passthrough {
        for (k, v) in &mut launch.env {
            if k == "ROCR_VISIBLE_DEVICES" {
                v.clone_from(rocr);
            }
        }
    }
}

/// The variables of `launch` that go into its container: not the host's paths and identity.
pub(crate) fn container_env(launch: &Launch) -> impl Iterator<Item = (&str, &str)> {
    launch.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).filter(|(k, _)| {
        !matches!(*k, "PATH" | "HOME" | "USER" | "LOGNAME" | "SHELL" | "PWD" | "OLDPWD" | "TERM" | "LD_LIBRARY_PATH")
    })
}

/// Whether `k=v` reads back the same from an env file: a plain name, one line.
pub(crate) fn fits_env_file(k: &str, v: &str) -> bool {
    k.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !v.contains(['\n', '\r'])
}

/// The file of a run directory holding its container's variables (root's, 0600).
pub const ENV_FILE: &str = "container.env";

/// Writes the container's variables of one line each into `dir`'s [`ENV_FILE`], 0600; its path.
pub fn write_env_file(dir: &Path, launch: &Launch) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(ENV_FILE);
    let _ = std::fs::remove_file(&path);
    let mut f = std::fs::OpenOptions::new().create_new(true).write(true).mode(0o600).open(&path)?;
    for (k, v) in container_env(launch).filter(|(k, v)| fits_env_file(k, v)) {
        writeln!(f, "{k}={v}")?;
    }
    Ok(path)
}
