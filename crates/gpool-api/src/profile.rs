//! What the API returns about a profile of a running job (`gpool profile`):
//! where its main thread's time went, how busy its accelerators were, the
//! bottleneck that follows and the fix to try. The flame graph and the
//! timeline are separate SVG documents under the same path.

use serde::{Deserialize, Serialize};

/// The share of main-thread samples one activity had.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ActivityShare {
    /// `data loading`, `synchronisation`, `host-to-device copies`, `optimizer`,
    /// `CPU compute (NumPy)`, `other Python`, `idle`.
    pub activity: String,
    /// 0 to 1.
    pub share: f64,
}

/// One replica's part of a profile.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProfiledReplica {
    pub node: String,
    pub rank: u32,
    /// The Python process py-spy attached to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Stack samples taken (every thread).
    pub stack_samples: u64,
    /// Device readings taken.
    pub device_readings: u64,
    /// Why this replica has no stacks, if it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `gpool profile JOB`: the latest profile of a job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProfileView {
    pub job: u64,
    /// The run (attempt) profiled.
    pub attempt: u32,
    /// When the window began (RFC 3339).
    pub taken_at: String,
    pub seconds: u32,
    /// Native frames were sampled too (C extensions, BLAS, CUDA runtime).
    #[serde(default)]
    pub native: bool,
    /// `input-bound`, `CPU-bound`, `sync-bound`, `accelerator-bound` or `unclear`.
    pub bottleneck: String,
    /// The numbers behind the bottleneck, in a sentence.
    pub why: String,
    /// What to try.
    pub fix: String,
    /// Main-thread samples the verdict reads.
    pub main_thread_samples: u64,
    /// Largest share first.
    pub shares: Vec<ActivityShare>,
    /// Mean accelerator utilisation over the window, percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accelerator_busy_pct: Option<f64>,
    pub replicas: Vec<ProfiledReplica>,
    /// Where the flame graph (SVG) is.
    pub flamegraph: String,
    /// Where the timeline of accelerator utilisation and memory (SVG) is.
    pub timeline: String,
}
