//! A job's profile as the control plane keeps it (the store's meta entry
//! `profile/<job>`, the latest one only): what each profiled replica's node
//! recorded. The verdict is not stored but read from it each time, by the
//! pure core (`gpool_core::profile`), so a better classifier improves old
//! profiles too.

use gpool_api as api;
use gpool_api::agent::ProfileCapture;
use gpool_core::profile::{self, Activity};
use serde::{Deserialize, Serialize};

/// The store's key for a job's latest profile.
pub fn key(job: u64) -> String {
    format!("profile/{job}")
}

/// A replica's stacks, line by line: one line that does not parse must not hide the rest.
fn replica_stacks(c: &ProfileCapture) -> Vec<profile::Stack> {
    c.stacks.lines().filter_map(|l| profile::parse_collapsed(l).ok()).flatten().collect()
}

/// One replica's part.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplicaCapture {
    pub node: String,
    pub rank: u32,
    pub capture: ProfileCapture,
}

/// A finished profile.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredProfile {
    pub job: u64,
    pub attempt: u32,
    /// When the window began.
    pub taken_ms: i64,
    pub seconds: u32,
    /// With native frames (py-spy `--native`).
    #[serde(default)]
    pub native: bool,
    pub replicas: Vec<ReplicaCapture>,
}

impl StoredProfile {
    /// Every replica's stacks, in py-spy's collapsed form (lines that do not
    /// parse are left out: one bad line must not hide the rest).
    pub fn stacks(&self) -> Vec<profile::Stack> {
        self.replicas.iter().flat_map(|r| replica_stacks(&r.capture)).collect()
    }

    /// Whether any replica recorded stacks.
    pub fn has_stacks(&self) -> bool {
        self.replicas.iter().any(|r| !r.capture.stacks.trim().is_empty())
    }

    /// Why no replica has stacks, one clause per replica.
    pub fn errors(&self) -> String {
        let each: Vec<String> = self
            .replicas
            .iter()
            .map(|r| {
                let why = r.capture.error.as_deref().unwrap_or("py-spy recorded no samples");
                format!("rank {} on node {}: {why}", r.rank, r.node)
            })
            .collect();
        each.join("; ")
    }

    pub fn view(&self) -> api::ProfileView {
        let stacks = self.stacks();
        let util: Vec<f64> = self.replicas.iter().flat_map(|r| r.capture.samples.iter().map(|s| s.util_pct)).collect();
        let v = profile::verdict(&stacks, &util);
        let mut shares: Vec<(Activity, f64)> = v.shares.iter().map(|(a, s)| (*a, *s)).collect();
        shares.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let base = format!("/api/v1/jobs/{}/profile", self.job);
        api::ProfileView {
            job: self.job,
            attempt: self.attempt,
            taken_at: api::time::rfc3339(self.taken_ms),
            seconds: self.seconds,
            native: self.native,
            bottleneck: v.bottleneck.as_str().to_string(),
            why: v.why,
            fix: v.fix,
            main_thread_samples: v.samples,
            shares: shares
                .into_iter()
                .map(|(a, share)| api::ActivityShare { activity: a.as_str().to_string(), share })
                .collect(),
            accelerator_busy_pct: v.accelerator_busy_pct,
            replicas: self
                .replicas
                .iter()
                .map(|r| api::ProfiledReplica {
                    node: r.node.clone(),
                    rank: r.rank,
                    pid: r.capture.pid,
                    stack_samples: replica_stacks(&r.capture).iter().fold(0u64, |a, s| a.saturating_add(s.count)),
                    device_readings: r.capture.samples.len() as u64,
                    error: r.capture.error.clone(),
                })
                .collect(),
            flamegraph: format!("{base}/flamegraph.svg"),
            timeline: format!("{base}/timeline.svg"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpool_api::agent::DeviceReading;

    fn stored(stacks: &str, util: f64) -> StoredProfile {
        let samples = (0..50).map(|i| DeviceReading {
            t_ms: i * 100,
            device: "GPU-0".into(),
            util_pct: util,
            memory_used_mb: Some(1000),
        });
        StoredProfile {
            job: 7,
            attempt: 1,
            taken_ms: 0,
            seconds: 5,
            native: false,
            replicas: vec![ReplicaCapture {
                node: "n1".into(),
                rank: 0,
                capture: ProfileCapture {
                    pid: Some(42),
                    stacks: stacks.into(),
                    samples: samples.collect(),
                    error: None,
                },
            }],
        }
    }

    #[test]
    fn the_view_names_the_bottleneck_and_sorts_the_shares() {
        let p = stored(
            "<module> (t.py:1);__getitem__ (t.py:5);sleep (t.py:6) 400\n<module> (t.py:1);step (t.py:9) 100\n",
            10.0,
        );
        let v = p.view();
        assert_eq!(v.bottleneck, "input-bound");
        assert_eq!(v.main_thread_samples, 500);
        assert_eq!(v.shares[0].activity, "data loading");
        assert!((v.shares[0].share - 0.8).abs() < 1e-9);
        assert_eq!(v.replicas[0].stack_samples, 500);
        assert_eq!(v.replicas[0].device_readings, 50);
        assert_eq!(v.flamegraph, "/api/v1/jobs/7/profile/flamegraph.svg");
    }

    #[test]
    fn a_bad_line_does_not_hide_the_others() {
        let p = stored("<module> (t.py:1);__getitem__ (t.py:5) 400\nnot a stack line\n", 0.0);
        assert_eq!(p.view().main_thread_samples, 400);
        assert_eq!(p.view().replicas[0].stack_samples, 400);
    }

    #[test]
    fn errors_name_each_replica() {
        let mut p = stored("", 0.0);
        p.replicas[0].capture.error = Some("py-spy is not installed".into());
        assert!(!p.has_stacks());
        assert_eq!(p.errors(), "rank 0 on node n1: py-spy is not installed");
    }
}
