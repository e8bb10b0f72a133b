//! For the tests of the verbs: builders of API views with plain defaults, and
//! snapshot files.
//!
//! A snapshot is the expected output of a `render`, committed under
//! `crates/gpool-cli/tests/snapshots/NAME`. A test fails when the output
//! differs; to accept new output, run the tests with `GPOOL_UPDATE_SNAPSHOTS=1`
//! (`GPOOL_UPDATE_SNAPSHOTS=1 cargo test -p gpool-cli --bins`), which rewrites
//! the files, and review the change with `git diff`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use gpool_api::spec::Quantity;
use gpool_api::{self as api, JobSpec, JobState};

/// The environment variable that makes [`assert_snapshot`] write instead of compare.
pub(crate) const UPDATE_VAR: &str = "GPOOL_UPDATE_SNAPSHOTS";

/// When every view of the tests was submitted.
const T0: &str = "2025-03-01T09:00:00Z";
/// When the running ones started.
const T1: &str = "2025-03-01T09:00:02.417Z";

fn snapshot_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests").join("snapshots").join(name)
}

/// Checks `actual` against the snapshot `name` (or writes it, with `GPOOL_UPDATE_SNAPSHOTS=1`).
#[track_caller]
pub(crate) fn assert_snapshot(name: &str, actual: &str) {
    let path = snapshot_path(name);
    let expected = std::fs::read_to_string(&path).ok();
    if std::env::var(UPDATE_VAR).is_ok_and(|v| v == "1") {
        if expected.as_deref() != Some(actual) {
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("snapshot directory");
            std::fs::write(&path, actual).expect("write the snapshot");
        }
        return;
    }
    let Some(expected) = expected else {
        panic!(
            "no snapshot {}: run `{UPDATE_VAR}=1 cargo test -p gpool-cli --bins` to write it, then review and commit it",
            path.display()
        );
    };
    if expected != actual {
        panic!(
            "output differs from the snapshot {} (- expected, + actual):\n{}\nIf the new output is right: {UPDATE_VAR}=1 cargo test -p gpool-cli --bins, then review `git diff`.",
            path.display(),
            line_diff(&expected, actual)
        );
    }
}

/// The lines that differ, with their numbers.
fn line_diff(expected: &str, actual: &str) -> String {
    let (e, a): (Vec<&str>, Vec<&str>) = (expected.split('\n').collect(), actual.split('\n').collect());
    let mut out = String::new();
    for i in 0..e.len().max(a.len()) {
        let (x, y) = (e.get(i), a.get(i));
        if x != y {
            if let Some(x) = x {
                out.push_str(&format!("{:>4} - {x:?}\n", i + 1));
            }
            if let Some(y) = y {
                out.push_str(&format!("{:>4} + {y:?}\n", i + 1));
            }
        }
    }
    out
}

/// A pending job of ana's asking for nothing, running `python train.py`.
pub(crate) fn job(id: u64) -> JobB {
    JobB(api::JobView {
        id,
        name: format!("job-{id}"),
        user: "ana".into(),
        team: "ml".into(),
        queue: "default".into(),
        state: JobState::Pending,
        reason: None,
        priority: 0,
        submitted_at: T0.into(),
        started_at: None,
        ended_at: None,
        attempt: 0,
        restarts: 0,
        replicas: Vec::new(),
        exit: None,
        usage: None,
        learned_estimate: None,
        late: None,
        estimated_start: None,
        array: None,
        running_replicas: 0,
        resizes: Vec::new(),
        spec: JobSpec::new(vec!["python".into(), "train.py".into()]),
    })
}

pub(crate) struct JobB(api::JobView);

impl JobB {
    pub(crate) fn build(self) -> api::JobView {
        self.0
    }
    pub(crate) fn name(mut self, name: &str) -> JobB {
        self.0.name = name.into();
        self.0.spec.name = Some(name.into());
        self
    }
    pub(crate) fn user(mut self, user: &str) -> JobB {
        self.0.user = user.into();
        self
    }
    pub(crate) fn queue(mut self, queue: &str) -> JobB {
        self.0.queue = queue.into();
        self.0.spec.queue = Some(queue.into());
        self
    }
    pub(crate) fn priority(mut self, p: i32) -> JobB {
        self.0.priority = p;
        self.0.spec.priority = Some(api::spec::Priority::Value(p));
        self
    }
    pub(crate) fn shell(mut self, line: &str) -> JobB {
        self.0.spec.command = api::Command::Shell(line.into());
        self
    }
    pub(crate) fn resource(mut self, key: &str, q: Quantity) -> JobB {
        self.0.spec.resources.insert(key.into(), q);
        self
    }
    /// Whole GPUs per replica.
    pub(crate) fn gpus(self, n: u32) -> JobB {
        self.resource("nvidia.com/gpu", Quantity::Number(f64::from(n)))
    }
    pub(crate) fn mig(self, profile: &str) -> JobB {
        self.resource(&format!("nvidia.com/mig-{profile}"), Quantity::Number(1.0))
    }
    pub(crate) fn gpu_memory(self, text: &str) -> JobB {
        self.resource("gpool.io/gpu-memory", Quantity::Text(text.into()))
    }
    pub(crate) fn replicas(mut self, n: u32) -> JobB {
        self.0.spec.replicas = gpool_api::spec::Replicas::fixed(n);
        self
    }
    /// Task `index` of array `of` (of `tasks` tasks from 0, at most `limit` at once).
    pub(crate) fn array(mut self, of: u64, index: u32, tasks: u32, limit: Option<u32>) -> JobB {
        let max_index = tasks.saturating_sub(1);
        self.0.array = Some(api::ArrayView { job: of, index, tasks, limit, min_index: 0, max_index });
        self
    }
    pub(crate) fn state(mut self, s: JobState) -> JobB {
        self.0.state = s;
        self
    }
    pub(crate) fn reason(mut self, r: &str) -> JobB {
        self.0.reason = Some(r.into());
        self
    }
    pub(crate) fn started(mut self, at: &str) -> JobB {
        self.0.started_at = Some(at.into());
        self.0.attempt = self.0.attempt.max(1);
        self
    }
    pub(crate) fn ended(mut self, at: &str) -> JobB {
        self.0.ended_at = Some(at.into());
        self
    }
    /// Running on `node`, a replica per entry of `devices` (its `CUDA_VISIBLE_DEVICES`).
    pub(crate) fn running_on(mut self, node: &str, devices: &[&str]) -> JobB {
        self.0.state = JobState::Running;
        self.0.replicas = devices
            .iter()
            .zip(0..)
            .map(|(d, rank)| {
                let (gpus, mig) = if d.starts_with("MIG-") {
                    (Vec::new(), vec![(*d).to_string()])
                } else {
                    (d.split(',').filter_map(|g| g.parse().ok()).collect(), Vec::new())
                };
                api::ReplicaView {
                    rank,
                    node: node.into(),
                    gpus,
                    mig,
                    cuda_visible_devices: (*d).into(),
                    gpu_share: None,
                    pid: Some(4100 + rank),
                }
            })
            .collect();
        self.started(T1)
    }
    pub(crate) fn exit(mut self, code: Option<i32>, signal: Option<i32>) -> JobB {
        self.0.exit = Some(api::ExitView { code, signal });
        self
    }
    pub(crate) fn attempt(mut self, attempt: u32, restarts: u32) -> JobB {
        self.0.attempt = attempt;
        self.0.restarts = restarts;
        self
    }
    pub(crate) fn usage(mut self, u: UsageB) -> JobB {
        self.0.usage = Some(u.0);
        self
    }
}

/// Usage of `gpu_hours`, `idle` of them idle, nothing else known.
pub(crate) fn usage(gpu_hours: f64, idle: f64) -> UsageB {
    UsageB(api::UsageSummary { gpu_hours, idle_gpu_hours: idle, ..Default::default() })
}

pub(crate) struct UsageB(api::UsageSummary);

impl UsageB {
    pub(crate) fn util(mut self, mean: f64) -> UsageB {
        self.0.mean_gpu_util = Some(mean);
        self
    }
    pub(crate) fn energy_wh(mut self, wh: f64) -> UsageB {
        self.0.energy_wh = Some(wh);
        self
    }
    pub(crate) fn peak_memory_mb(mut self, mb: u64) -> UsageB {
        self.0.peak_memory_mb = Some(mb);
        self
    }
    pub(crate) fn cpu(mut self, cores: f64) -> UsageB {
        self.0.mean_cpu_cores = Some(cores);
        self
    }
    pub(crate) fn cost(mut self, usd: f64) -> UsageB {
        self.0.cost_usd = Some(usd);
        self
    }
}

/// Advice on `job` with no usage and no findings yet.
pub(crate) fn advice(job: u64) -> AdviceB {
    AdviceB(api::AdviceView {
        job,
        summary: api::UsageSummary::default(),
        p5_gpu_util: None,
        p95_gpu_util: None,
        price_per_gpu_hour: None,
        findings: Vec::new(),
        profile: None,
    })
}

/// An input-bound profile of a one-replica job.
pub(crate) fn profile_view(job: u64) -> api::ProfileView {
    let share = |activity: &str, share: f64| api::ActivityShare { activity: activity.into(), share };
    api::ProfileView {
        job,
        attempt: 1,
        taken_at: "2026-11-26T03:00:00.000Z".into(),
        seconds: 5,
        native: false,
        bottleneck: "input-bound".into(),
        why: "88% of main-thread samples in data loading, accelerator busy 9%".into(),
        fix: "load data ahead of the model: DataLoader(num_workers=N, pin_memory=True)".into(),
        main_thread_samples: 498,
        shares: vec![share("data loading", 0.88), share("other Python", 0.1), share("idle", 0.02)],
        accelerator_busy_pct: Some(9.4),
        replicas: vec![api::ProfiledReplica {
            node: "n1".into(),
            rank: 0,
            pid: Some(4242),
            stack_samples: 512,
            device_readings: 50,
            error: None,
        }],
        flamegraph: format!("/api/v1/jobs/{job}/profile/flamegraph.svg"),
        timeline: format!("/api/v1/jobs/{job}/profile/timeline.svg"),
    }
}

pub(crate) struct AdviceB(api::AdviceView);

impl AdviceB {
    pub(crate) fn build(self) -> api::AdviceView {
        self.0
    }
    pub(crate) fn summary(mut self, u: UsageB) -> AdviceB {
        self.0.summary = u.0;
        self
    }
    pub(crate) fn spread(mut self, p5: f64, p95: f64) -> AdviceB {
        self.0.p5_gpu_util = Some(p5);
        self.0.p95_gpu_util = Some(p95);
        self
    }
    pub(crate) fn profile(mut self, p: api::ProfileView) -> AdviceB {
        self.0.profile = Some(p);
        self
    }
    pub(crate) fn price(mut self, usd: f64) -> AdviceB {
        self.0.price_per_gpu_hour = Some(usd);
        self
    }
    pub(crate) fn finding(mut self, f: FindingB) -> AdviceB {
        self.0.findings.push(f.0);
        self
    }
}

/// A finding without evidence, suggestions or waste.
pub(crate) fn finding(kind: &str, summary: &str) -> FindingB {
    FindingB(api::FindingView {
        kind: kind.into(),
        summary: summary.into(),
        evidence: Vec::new(),
        suggestions: Vec::new(),
        wasted_gpu_hours: 0.0,
        wasted_usd: None,
    })
}

pub(crate) struct FindingB(api::FindingView);

impl FindingB {
    pub(crate) fn evidence(mut self, e: &str) -> FindingB {
        self.0.evidence.push(e.into());
        self
    }
    pub(crate) fn suggest(mut self, s: &str) -> FindingB {
        self.0.suggestions.push(s.into());
        self
    }
    pub(crate) fn waste(mut self, gpu_hours: f64, usd: Option<f64>) -> FindingB {
        self.0.wasted_gpu_hours = gpu_hours;
        self.0.wasted_usd = usd;
        self
    }
}

/// An idle node that is up, on demand, simulated, with 96 CPUs, 1 TiB and no devices.
pub(crate) fn node(name: &str) -> NodeB {
    NodeB(api::NodeView {
        name: name.into(),
        gpu_sharing: "off".into(),
        container_runtime: None,
        state: "up".into(),
        pool: "on-demand".into(),
        cpus: 96.0,
        memory_mb: 1_048_576,
        free_cpus: 96.0,
        free_memory_mb: 1_048_576,
        labels: BTreeMap::new(),
        source: "simulated".into(),
        degraded: Vec::new(),
        addr: None,
        agent: None,
        devices: Vec::new(),
        jobs: Vec::new(),
        conditions: Vec::new(),
    })
}

pub(crate) struct NodeB(api::NodeView);

impl NodeB {
    pub(crate) fn build(self) -> api::NodeView {
        self.0
    }
    pub(crate) fn state(mut self, s: &str) -> NodeB {
        self.0.state = s.into();
        self
    }
    pub(crate) fn pool(mut self, p: &str) -> NodeB {
        self.0.pool = p.into();
        self
    }
    pub(crate) fn agent(mut self, session: &str, addr: Option<&str>) -> NodeB {
        self.0.agent = Some(session.into());
        self.0.addr = addr.map(Into::into);
        self
    }
    pub(crate) fn device(mut self, d: GpuB) -> NodeB {
        self.0.devices.push(d.0);
        self
    }
    pub(crate) fn jobs(mut self, ids: &[u64]) -> NodeB {
        self.0.jobs = ids.to_vec();
        self
    }
    pub(crate) fn free(mut self, cpus: f64, memory_mb: u64) -> NodeB {
        self.0.free_cpus = cpus;
        self.0.free_memory_mb = memory_mb;
        self
    }
}

/// A free whole GPU with no reading yet.
pub(crate) fn gpu(index: u32, model: &str) -> GpuB {
    let memory_mb = match model {
        "H100-80GB" | "A100-80GB" => 81_559,
        "L4" => 23_034,
        _ => 16_384,
    };
    GpuB(api::DeviceView {
        index,
        uuid: format!("GPU-{index:08x}-5a1e-4c0d-9e2f-{:012x}", u64::from(index) * 0x1111),
        kind: "gpu".into(),
        model: model.into(),
        memory_mb,
        nvlink_group: Some(0),
        mig: Vec::new(),
        job: None,
        shares: Vec::new(),
        name: Some(format!("NVIDIA {model}")),
        pci_bus_id: Some(format!("00000000:{:02X}:00.0", 0x18 + index)),
        telemetry: None,
        degraded: None,
        quarantine: None,
    })
}

pub(crate) struct GpuB(api::DeviceView);

impl GpuB {
    pub(crate) fn job(mut self, id: u64) -> GpuB {
        self.0.job = Some(id);
        self
    }
    pub(crate) fn telemetry(mut self, r: ReadingB) -> GpuB {
        self.0.telemetry = Some(r.0);
        self
    }
    pub(crate) fn degraded(mut self, why: &str) -> GpuB {
        self.0.degraded = Some(why.into());
        self
    }
    pub(crate) fn quarantined(mut self, fault: &str, action: &str) -> GpuB {
        self.0.quarantine = Some(api::QuarantineView {
            node: String::new(),
            gpu: self.0.index,
            fault: fault.into(),
            since: "2026-11-27T14:02:00Z".into(),
            action: action.into(),
            operator_only: false,
            last_check: None,
            lost_gpu_hours: 0.0,
        });
        self
    }
    pub(crate) fn mig(mut self, m: MigB) -> GpuB {
        self.0.kind = "mig-parent".into();
        self.0.mig.push(m.0);
        self
    }
}

/// A reading of nothing (every value absent).
pub(crate) fn reading() -> ReadingB {
    ReadingB(api::DeviceTelemetry { at: "2025-03-01T09:30:00Z".into(), ..Default::default() })
}

pub(crate) struct ReadingB(api::DeviceTelemetry);

impl ReadingB {
    pub(crate) fn util(mut self, pct: f64) -> ReadingB {
        self.0.gpu_util = Some(pct);
        self
    }
    pub(crate) fn memory(mut self, used_mb: u64, total_mb: u64) -> ReadingB {
        self.0.memory_used_mb = Some(used_mb);
        self.0.memory_total_mb = Some(total_mb);
        self
    }
    pub(crate) fn temp(mut self, c: f64) -> ReadingB {
        self.0.temperature_c = Some(c);
        self
    }
    pub(crate) fn power(mut self, w: f64) -> ReadingB {
        self.0.power_w = Some(w);
        self
    }
}

/// A free MIG instance of `profile` in GPU instance `gi`.
pub(crate) fn mig(profile: &str, gi: u32) -> MigB {
    let memory_mb = profile.split('.').nth(1).and_then(|m| m.trim_end_matches("gb").parse::<u64>().ok()).unwrap_or(0);
    MigB(api::MigView {
        profile: profile.into(),
        uuid: format!("MIG-{gi:04x}c0de-7a3b-5d1e-8f20-{gi:012x}"),
        gi_id: Some(gi),
        memory_mb: memory_mb * 1024,
        shared_memory: false,
        job: None,
        memory_used_mb: None,
    })
}

pub(crate) struct MigB(api::MigView);

impl MigB {
    pub(crate) fn job(mut self, id: u64) -> MigB {
        self.0.job = Some(id);
        self
    }
    pub(crate) fn used(mut self, mb: u64) -> MigB {
        self.0.memory_used_mb = Some(mb);
        self
    }
}

/// A queue with no guarantee, no cap and nothing in it.
pub(crate) fn queue(name: &str) -> QueueB {
    QueueB(api::QueueView {
        name: name.into(),
        cohort: None,
        guarantee_gpus: 0.0,
        max_gpus: None,
        used_gpus: 0.0,
        max_per_kind: Default::default(),
        used_per_kind: Default::default(),
        pending: 0,
        running: 0,
        window: None,
    })
}

pub(crate) struct QueueB(api::QueueView);

impl QueueB {
    pub(crate) fn build(self) -> api::QueueView {
        self.0
    }
    pub(crate) fn cohort(mut self, c: &str) -> QueueB {
        self.0.cohort = Some(c.into());
        self
    }
    pub(crate) fn guarantee(mut self, gpus: f64) -> QueueB {
        self.0.guarantee_gpus = gpus;
        self
    }
    pub(crate) fn max(mut self, gpus: f64) -> QueueB {
        self.0.max_gpus = Some(gpus);
        self
    }
    /// A kind's maximum and use, by resource name.
    pub(crate) fn kind(mut self, resource: &str, max: Option<f64>, used: f64) -> QueueB {
        if let Some(m) = max {
            self.0.max_per_kind.insert(resource.into(), m);
        }
        if used > 0.0 {
            self.0.used_per_kind.insert(resource.into(), used);
        }
        self
    }
    pub(crate) fn used(mut self, gpus: f64) -> QueueB {
        self.0.used_gpus = gpus;
        self
    }
    pub(crate) fn counts(mut self, pending: u64, running: u64) -> QueueB {
        self.0.pending = pending;
        self.0.running = running;
        self
    }
}

/// Event `seq`, `seq` seconds after the start of the day of the tests.
pub(crate) fn event(seq: u64, kind: &str, message: &str) -> EventB {
    EventB(api::EventView {
        seq,
        at: format!("2025-03-01T09:00:{seq:02}Z"),
        job: None,
        user: None,
        kind: kind.into(),
        message: message.into(),
    })
}

pub(crate) struct EventB(api::EventView);

impl EventB {
    pub(crate) fn build(self) -> api::EventView {
        self.0
    }
    /// About a job of ana's.
    pub(crate) fn job(mut self, id: u64) -> EventB {
        self.0.job = Some(id);
        self.0.user = Some("ana".into());
        self
    }
}

/// An alert firing since the tests' start of the day, without labels.
pub(crate) fn alert(rule: &str, severity: &str, subject: &str, summary: &str) -> AlertB {
    AlertB(api::AlertView {
        rule: rule.into(),
        severity: severity.into(),
        subject: subject.into(),
        value: 0.0,
        since: T0.into(),
        summary: summary.into(),
        labels: BTreeMap::new(),
    })
}

pub(crate) struct AlertB(api::AlertView);

impl AlertB {
    pub(crate) fn build(self) -> api::AlertView {
        self.0
    }
    pub(crate) fn value(mut self, v: f64) -> AlertB {
        self.0.value = v;
        self
    }
    pub(crate) fn label(mut self, k: &str, v: &str) -> AlertB {
        self.0.labels.insert(k.into(), v.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_diff_names_the_lines_that_differ() {
        assert_eq!(line_diff("a\nb\n", "a\nc\n"), "   2 - \"b\"\n   2 + \"c\"\n");
        assert_eq!(line_diff("a\n", "a\nb\n"), "   2 - \"\"\n   2 + \"b\"\n   3 + \"\"\n");
    }
}
