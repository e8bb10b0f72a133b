//! A pipeline run's directory on a node (`GPOOL_PIPELINE_DIR`), where its
//! stages leave files for the stages after them: on the shared checkpoint
//! root when the node has one (every node of the cluster sees it), else in
//! the agent's data directory (shared by the stages that run on this node,
//! which on one machine is all of them).

use std::path::{Path, PathBuf};

pub use crate::protocol::PIPELINE_RUN_ENV as RUN_ENV;
/// Set by the agent: the run's directory.
pub const DIR_ENV: &str = "GPOOL_PIPELINE_DIR";

/// The run's directory for a replica whose environment names a run.
pub fn of(env: &[(String, String)], data_dir: &Path, checkpoint_root: Option<&Path>) -> Option<PathBuf> {
    let run: u64 = env.iter().find(|(k, _)| k == RUN_ENV)?.1.parse().ok()?;
    Some(match checkpoint_root {
        Some(root) => root.join(format!("pipeline-{run}")),
        None => data_dir.join("pipelines").join(run.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_has_one_directory_on_the_shared_root_or_in_the_data_directory() {
        let env = vec![("A".to_string(), "1".to_string()), (RUN_ENV.to_string(), "41".to_string())];
        let data = Path::new("/var/lib/gpool");
        assert_eq!(of(&env, data, None), Some(PathBuf::from("/var/lib/gpool/pipelines/41")));
        assert_eq!(of(&env, data, Some(Path::new("/shared/ckpt"))), Some(PathBuf::from("/shared/ckpt/pipeline-41")));
        assert_eq!(of(&env[..1], data, None), None, "a job outside a pipeline has none");
        let bad = vec![(RUN_ENV.to_string(), "../x".to_string())];
        assert_eq!(of(&bad, data, None), None, "only a run id names a directory");
    }
}
