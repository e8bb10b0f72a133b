//! GPU fault traces for `gpool sim --faults FILE`: the faults go through the
//! same core decisions as the daemon's (`gpool_core::fault`), so a site can
//! ask what a fault rate costs its queue before it happens.
//!
//! The file is CSV, a line a fault: `at,node,gpu,fault`, `at` in seconds on
//! the trace's clock (as jobs' submit times), `fault` one of `xid:N` (an
//! XID event), `ecc` (an uncorrectable ECC error), `gone` (fallen off the
//! bus) or `restore` (an operator brings the GPU back). A header line and
//! lines starting with `#` are skipped.
//!
//! What the simulator does with them is what the daemon does: a fault fatal
//! to the GPU quarantines it (nothing new is placed there) and requeues every
//! job on it; an application's XID requeues only its job (the simulator has
//! no failed jobs: its traces say how long jobs ran, not whether they
//! succeeded). A requeued job loses its work since it started: the
//! conservative case, a fault that allowed no checkpoint. A quarantined GPU
//! comes back with a `restore` line; the simulator runs no health checks.

use std::collections::BTreeMap;

use gpool_core::fault::{FaultChange, FaultReading, Faults};
use gpool_core::time::Time;
use gpool_core::{JobId, Snapshot};

/// One line of a fault trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultEvent {
    pub at_ms: i64,
    pub node: String,
    pub gpu: u32,
    pub what: FaultKind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FaultKind {
    Xid(u64),
    Ecc,
    Gone,
    Restore,
}

/// What the faults cost.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FaultReport {
    /// GPUs taken out of service.
    pub quarantines: u64,
    /// Jobs requeued because a GPU they ran on faulted (or raised their own XID).
    pub requeued: u64,
    /// GPU-hours of work the requeued jobs lost.
    pub lost_gpu_hours: f64,
    /// GPU-hours of GPUs out of service.
    pub out_gpu_hours: f64,
}

/// Reads a fault trace; errors name the line and what is wrong.
pub fn parse(text: &str) -> Result<Vec<FaultEvent>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        let n = i + 1;
        if line.is_empty() || line.starts_with('#') || (n == 1 && line.starts_with("at,")) {
            continue;
        }
        let cells: Vec<&str> = line.split(',').map(str::trim).collect();
        let [at, node, gpu, fault] = cells.as_slice() else {
            return Err(format!("line {n}: expected at,node,gpu,fault (e.g. 3600,node-0,1,xid:79), got {line:?}"));
        };
        let at: f64 = at.parse().map_err(|_| format!("line {n}: at {at:?} is not a number of seconds"))?;
        if !at.is_finite() || at < 0.0 {
            return Err(format!("line {n}: at {at} must be a time on the trace's clock, 0 or later"));
        }
        let gpu: u32 = gpu.parse().map_err(|_| format!("line {n}: gpu {gpu:?} is not a GPU index"))?;
        let what = match *fault {
            "ecc" => FaultKind::Ecc,
            "gone" => FaultKind::Gone,
            "restore" => FaultKind::Restore,
            f => match f.strip_prefix("xid:").map(str::parse) {
                Some(Ok(x)) => FaultKind::Xid(x),
                _ => return Err(format!("line {n}: fault {f:?} is not xid:N, ecc, gone or restore")),
            },
        };
        out.push(FaultEvent { at_ms: (at * 1000.0).round() as i64, node: node.to_string(), gpu, what });
    }
    out.sort_by_key(|e| e.at_ms);
    Ok(out)
}

/// A fault trace being replayed.
pub struct FaultReplay {
    events: Vec<FaultEvent>,
    next: usize,
    faults: Faults<(String, u32)>,
    /// Each GPU's readings so far (counters and whether it answers).
    readings: BTreeMap<(String, u32), FaultReading>,
    /// Since when each quarantined GPU has been out.
    out_since: BTreeMap<(String, u32), i64>,
    pub report: FaultReport,
}

impl FaultReplay {
    /// Checks that every line names a node and GPU of the cluster.
    pub fn new(events: Vec<FaultEvent>, snap: &Snapshot) -> Result<FaultReplay, String> {
        for e in &events {
            let node = snap.node_id(&e.node).and_then(|id| snap.node(id));
            let Some(node) = node else {
                return Err(format!("fault at {} s: the cluster has no node {:?}", e.at_ms / 1000, e.node));
            };
            if !node.devices.iter().any(|d| d.index == e.gpu) {
                return Err(format!("fault at {} s: node {} has no GPU {}", e.at_ms / 1000, e.node, e.gpu));
            }
        }
        let readings = events
            .iter()
            .map(|e| {
                (
                    (e.node.clone(), e.gpu),
                    FaultReading { xid_count: Some(0), ecc_uncorrected: Some(0), ..Default::default() },
                )
            })
            .collect();
        let mut faults = Faults::default();
        for (k, r) in &readings {
            faults.observe(k, Time::from_millis(0), r);
        }
        Ok(FaultReplay {
            events,
            next: 0,
            faults,
            readings,
            out_since: BTreeMap::new(),
            report: FaultReport::default(),
        })
    }

    /// When the next fault happens.
    pub fn next_event(&self) -> Option<i64> {
        self.events.get(self.next).map(|e| e.at_ms)
    }

    /// Applies the faults due by `now_ms` to the snapshot; returns the jobs
    /// to requeue, each with the GPUs it held.
    pub fn advance(&mut self, now_ms: i64, snap: &mut Snapshot) -> Result<Vec<JobId>, gpool_core::SnapshotError> {
        let mut requeue = Vec::new();
        while let Some(e) = self.events.get(self.next).filter(|e| e.at_ms <= now_ms).cloned() {
            self.next += 1;
            let key = (e.node.clone(), e.gpu);
            let Some(node) = snap.node_id(&e.node) else { continue };
            let r = self.readings.entry(key.clone()).or_default();
            let changes = match e.what {
                FaultKind::Restore => {
                    r.missing = false;
                    if self.faults.restore_by_operator(&key, Time::from_millis(now_ms)) {
                        self.back(&key, now_ms);
                    }
                    Vec::new()
                }
                FaultKind::Xid(x) => {
                    r.xid_count = Some(r.xid_count.unwrap_or(0) + 1);
                    r.xids_recent = vec![x];
                    r.missing = x == 79;
                    self.faults.observe(&key, Time::from_millis(now_ms), &r.clone())
                }
                FaultKind::Ecc => {
                    r.ecc_uncorrected = Some(r.ecc_uncorrected.unwrap_or(0) + 1);
                    self.faults.observe(&key, Time::from_millis(now_ms), &r.clone())
                }
                FaultKind::Gone => {
                    r.missing = true;
                    self.faults.observe(&key, Time::from_millis(now_ms), &r.clone())
                }
            };
            for c in changes {
                match c {
                    FaultChange::Quarantined(_) => {
                        self.report.quarantines += 1;
                        self.out_since.insert(key.clone(), now_ms);
                        requeue.extend(snap.jobs_on_gpu(node, e.gpu));
                    }
                    FaultChange::JobFatal(_) => requeue.extend(snap.jobs_on_gpu(node, e.gpu)),
                    FaultChange::Noted(_) => {}
                }
            }
            let out: Vec<u32> = self
                .faults
                .quarantined_in((e.node.clone(), 0)..=(e.node.clone(), u32::MAX))
                .map(|((_, g), _)| *g)
                .collect();
            snap.set_quarantined_gpus(node, &out)?;
        }
        requeue.sort_unstable();
        requeue.dedup();
        self.report.requeued += requeue.len() as u64;
        Ok(requeue)
    }

    fn back(&mut self, key: &(String, u32), now_ms: i64) {
        if let Some(since) = self.out_since.remove(key) {
            self.report.out_gpu_hours += (now_ms - since) as f64 / 3_600_000.0;
        }
    }

    /// The report, counting GPUs still out until `end_ms`.
    pub fn finish(mut self, end_ms: i64) -> FaultReport {
        let keys: Vec<(String, u32)> = self.out_since.keys().cloned().collect();
        for k in keys {
            self.back(&k, end_ms);
        }
        self.report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_trace_reads_and_bad_lines_say_what_is_wrong() {
        let ev =
            parse("at,node,gpu,fault\n# a comment\n7200,n0,1,restore\n3600,n0,1,xid:79\n10,n1,0,ecc\n").expect("ok");
        assert_eq!(ev.iter().map(|e| e.at_ms).collect::<Vec<_>>(), [10_000, 3_600_000, 7_200_000], "sorted");
        assert_eq!(ev[1].what, FaultKind::Xid(79));
        for (bad, says) in [
            ("1,n0,1", "expected at,node,gpu,fault"),
            ("x,n0,1,ecc", "not a number of seconds"),
            ("-5,n0,1,ecc", "0 or later"),
            ("1,n0,one,ecc", "not a GPU index"),
            ("1,n0,1,xid:", "not xid:N"),
            ("1,n0,1,melted", "not xid:N"),
        ] {
            let err = parse(bad).expect_err(bad);
            assert!(err.contains(says) && err.starts_with("line 1"), "{bad}: {err}");
        }
    }
}
