//! GPU faults: from each GPU's readings, which GPUs are out of service
//! (*quarantined*), which jobs a fault of their own ends, and when a
//! quarantined GPU may come back.
//!
//! A GPU is quarantined at the first reading that shows a fault fatal to it:
//! an XID the table ([`crate::health::xid`]) marks so, a rise of its
//! uncorrectable ECC count, a failed row remap, a remap or page retirement
//! waiting for a reset, the device's own word that it is unhealthy, or its
//! absence from a report that read the node's other GPUs (fallen off the bus).
//! It comes back only when an operator restores it, or when a health check
//! passes: the operator's program if the node has one, else the built-in check
//! (it answers, shows no fault, and nothing rose for [`QUIET_FOR`]). A GPU that
//! faults again within [`REPEAT_WINDOW`] of an earlier fault stays out until an
//! operator restores it.
//!
//! Counters (XIDs, ECC) are compared with the GPU's previous reading: the
//! first reading of a GPU sets the baseline, so an agent restart does not
//! quarantine a GPU for an error the control plane already acted on (its
//! quarantine is kept in the store, and restored with [`Faults::restore`]).
//!
//! Pure: the caller passes the time of each reading.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::health::xid::{XidAction, xid};
use crate::model::time::Time;

/// How long a quarantined GPU waits before its first health check, by default (the
/// job on it gets its grace period first, and a fault storm settles).
pub const CHECK_AFTER: Duration = Duration::from_secs(60);
/// How long after a failed check the next one runs, by default.
pub const CHECK_EVERY: Duration = Duration::from_secs(600);
/// How long a check may take before it counts as failed.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(300);
/// The built-in check passes after this long without a new fault.
pub const QUIET_FOR: Duration = Duration::from_secs(120);
/// After an operator restores a GPU, standing states (missing, a pending
/// remap) are not held against it for this long: reports read before the
/// restore reached the node may still be on their way.
pub const RESTORE_SETTLE: Duration = Duration::from_secs(10);
/// A second fault within this time of an earlier one keeps the GPU out
/// until an operator restores it.
pub const REPEAT_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// When quarantined GPUs are checked (`gpool serve --health-check-after`, `--health-check-every`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckTiming {
    /// How long after it was taken out a GPU is first checked.
    pub after: Duration,
    /// How long after a failed check the next one runs.
    pub every: Duration,
}

impl Default for CheckTiming {
    fn default() -> Self {
        CheckTiming { after: CHECK_AFTER, every: CHECK_EVERY }
    }
}

/// What one GPU's reading says, as far as faults go.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultReading {
    /// `false`: the GPU is missing from a report that read the node's others.
    pub missing: bool,
    pub xid_count: Option<u64>,
    /// The last XIDs, oldest first.
    pub xids_recent: Vec<u64>,
    pub ecc_uncorrected: Option<u64>,
    pub remap_pending: Option<bool>,
    pub remap_failed: Option<bool>,
    pub retired_pages_pending: Option<bool>,
    /// The device's own word that it is unhealthy.
    pub health_fault: Option<String>,
}

/// A fault, as said in events, `gpool nodes` and job reasons.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    Xid(u64),
    /// Uncorrectable ECC errors rose by this many.
    EccUncorrected(u64),
    RemapFailed,
    RemapPending,
    RetirementPending,
    Missing,
    Device(String),
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Xid(x) => write!(f, "{}", xid(*x)),
            Fault::EccUncorrected(n) => write!(f, "{n} new uncorrectable ECC error(s)"),
            Fault::RemapFailed => f.write_str("a row remap failed (no spare rows left)"),
            Fault::RemapPending => f.write_str("a row remap waits for a GPU reset"),
            Fault::RetirementPending => f.write_str("a page retirement waits for a GPU reset"),
            Fault::Missing => f.write_str("the GPU stopped answering (fallen off the bus?)"),
            Fault::Device(why) => write!(f, "the device reports: {why}"),
        }
    }
}

/// What a reading changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FaultChange {
    /// The GPU is out of service from now: stop what runs on it and place
    /// it again elsewhere, as an infrastructure failure.
    Quarantined(Fault),
    /// An XID of the application's own: the job on the GPU ends, failed.
    JobFatal(u64),
    /// A fault seen while already out, or an XID only noted.
    Noted(Fault),
}

/// Why a quarantined GPU came back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Returned {
    Operator,
    /// The node's health-check program passed (its output).
    Program(String),
    /// The built-in check passed.
    BuiltIn,
}

/// A GPU out of service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quarantine {
    /// The fault that took it out.
    pub fault: String,
    pub since: Time,
    /// It faulted again within [`REPEAT_WINDOW`]: only an operator brings it back.
    pub operator_only: bool,
    /// The last check's time and what it said, if one ran.
    pub last_check: Option<(Time, String)>,
}

#[derive(Clone, Debug, Default)]
struct Track {
    xid_count: Option<u64>,
    ecc_uncorrected: Option<u64>,
    /// When its fatal faults happened, within [`REPEAT_WINDOW`].
    faults: Vec<Time>,
    quarantine: Option<Quarantine>,
    /// When the last fault was seen (the built-in check counts quiet from here).
    last_fault: Option<Time>,
    /// A check is running since then.
    checking: Option<Time>,
    /// When the next check is due, where the last one said so (the built-in
    /// check of a GPU that answers: once it has been quiet long enough).
    next_check: Option<Time>,
    clean_now: bool,
    /// Standing states are not held against it before then (an operator restored it).
    settle_until: Option<Time>,
}

/// Fault state of every GPU by key (a node and GPU index, say).
#[derive(Clone, Debug)]
pub struct Faults<K> {
    tracks: BTreeMap<K, Track>,
    timing: CheckTiming,
}

impl<K: Ord + Clone> Default for Faults<K> {
    fn default() -> Self {
        Faults::new(CheckTiming::default())
    }
}

impl<K: Ord + Clone> Faults<K> {
    pub fn new(timing: CheckTiming) -> Faults<K> {
        Faults { tracks: BTreeMap::new(), timing }
    }

    /// Takes one reading of `key` at `now`; says what it changed.
    pub fn observe(&mut self, key: &K, now: Time, r: &FaultReading) -> Vec<FaultChange> {
        let t = self.tracks.entry(key.clone()).or_default();
        let mut fatal = Vec::new();
        let mut out = Vec::new();
        if let (Some(was), Some(is)) = (t.xid_count, r.xid_count) {
            // A count below the last one restarted (the agent did): all of it is new.
            let rise = if is < was { is } else { is - was };
            let new = rise.min(r.xids_recent.len() as u64) as usize;
            for &x in &r.xids_recent[r.xids_recent.len() - new..] {
                match xid(x).action {
                    XidAction::TakeGpuOut => fatal.push(Fault::Xid(x)),
                    XidAction::EndJob => out.push(FaultChange::JobFatal(x)),
                    XidAction::Note => out.push(FaultChange::Noted(Fault::Xid(x))),
                }
            }
        }
        if let (Some(was), Some(is)) = (t.ecc_uncorrected, r.ecc_uncorrected) {
            // A volatile count restarts at 0 with the driver or a GPU reset.
            let rise = if is < was { is } else { is - was };
            if rise > 0 {
                fatal.push(Fault::EccUncorrected(rise));
            }
        }
        if !r.missing {
            t.xid_count = r.xid_count.or(t.xid_count);
            t.ecc_uncorrected = r.ecc_uncorrected.or(t.ecc_uncorrected);
        }
        // States, not counters: they count at first sight too.
        let states = [
            (r.missing, Fault::Missing),
            (r.remap_failed == Some(true), Fault::RemapFailed),
            (r.remap_pending == Some(true), Fault::RemapPending),
            (r.retired_pages_pending == Some(true), Fault::RetirementPending),
        ];
        let mut standing: Vec<Fault> = states.into_iter().filter(|(on, _)| *on).map(|(_, f)| f).collect();
        standing.extend(r.health_fault.clone().map(Fault::Device));
        if t.settle_until.is_some_and(|until| now < until) {
            standing.clear();
        }
        t.clean_now = fatal.is_empty() && standing.is_empty();
        if !t.clean_now {
            t.last_fault = Some(now);
        }
        match &t.quarantine {
            None => {
                // A standing state is a fault once, when the GPU is taken out for it.
                if let Some(first) = fatal.first().or(standing.first()).cloned() {
                    t.faults.retain(|&at| now.since(at) < REPEAT_WINDOW);
                    let repeat = !t.faults.is_empty();
                    t.faults.push(now);
                    t.quarantine = Some(Quarantine {
                        fault: first.to_string(),
                        since: now,
                        operator_only: repeat,
                        last_check: None,
                    });
                    out.insert(0, FaultChange::Quarantined(first));
                    out.extend(fatal.into_iter().skip(1).map(FaultChange::Noted));
                }
            }
            Some(_) => out.extend(fatal.into_iter().map(FaultChange::Noted)),
        }
        out
    }

    /// Whether `key` is due a health check at `now` (quarantined, may come
    /// back without an operator, none running, and its wait is over).
    pub fn check_due(&self, key: &K, now: Time) -> bool {
        let Some(t) = self.tracks.get(key) else { return false };
        let Some(q) = &t.quarantine else { return false };
        if q.operator_only {
            return false;
        }
        if let Some(began) = t.checking {
            return now.since(began) >= CHECK_TIMEOUT;
        }
        if let Some(at) = t.next_check {
            return now >= at;
        }
        match &q.last_check {
            None => now.since(q.since) >= self.timing.after,
            Some((at, _)) => now.since(*at) >= self.timing.every,
        }
    }

    /// A check of `key` began at `now`.
    pub fn check_started(&mut self, key: &K, now: Time) {
        if let Some(t) = self.tracks.get_mut(key) {
            t.checking = Some(now);
        }
    }

    /// Whether a check of `key` was ordered and has not answered: a verdict
    /// nobody ordered (an old one, after an operator's restore) is ignored.
    pub fn checking(&self, key: &K) -> bool {
        self.tracks.get(key).is_some_and(|t| t.checking.is_some() && t.quarantine.is_some())
    }

    /// What the node said of a check of `key`: `Some((passed, output))` from
    /// its program, `None` when it has none (then the built-in check
    /// decides). `Some(how)` when the GPU came back; `None` too for a
    /// verdict no running check asked for.
    pub fn check_done(&mut self, key: &K, now: Time, program: Option<(bool, String)>) -> Option<Returned> {
        let t = self.tracks.get_mut(key)?;
        t.checking.take()?;
        t.next_check = None;
        let q = t.quarantine.as_mut()?;
        let (passed, said, how) = match program {
            Some((passed, output)) => (passed, output.clone(), Returned::Program(output)),
            None => {
                let quiet = t.last_fault.is_none_or(|at| now.since(at) >= QUIET_FOR);
                let said = match (t.clean_now, quiet) {
                    (false, _) => "built-in check: the GPU still shows a fault".to_string(),
                    (true, false) => {
                        format!("built-in check: the GPU answers but faulted less than {} s ago", QUIET_FOR.as_secs())
                    }
                    (true, true) => "built-in check: the GPU answers and shows no new fault".to_string(),
                };
                if !(t.clean_now && quiet) {
                    // The built-in check is cheap: again as soon as it could pass.
                    t.next_check = t.last_fault.map(|at| at.plus(QUIET_FOR));
                }
                (t.clean_now && quiet, said, Returned::BuiltIn)
            }
        };
        q.last_check = Some((now, said));
        if !passed || q.operator_only {
            return None;
        }
        t.quarantine = None;
        Some(how)
    }

    /// An operator brings `key` back at `now`; `false` if it was not out.
    pub fn restore_by_operator(&mut self, key: &K, now: Time) -> bool {
        let Some(t) = self.tracks.get_mut(key) else { return false };
        if t.quarantine.take().is_none() {
            return false;
        }
        (t.checking, t.next_check) = (None, None);
        t.settle_until = Some(now.plus(RESTORE_SETTLE));
        true
    }

    /// The quarantine of `key`, if it is out.
    pub fn quarantine(&self, key: &K) -> Option<&Quarantine> {
        self.tracks.get(key)?.quarantine.as_ref()
    }

    /// Every GPU out of service.
    pub fn quarantined(&self) -> impl Iterator<Item = (&K, &Quarantine)> {
        self.tracks.iter().filter_map(|(k, t)| Some((k, t.quarantine.as_ref()?)))
    }

    /// The GPUs out of service among the keys in `range` (one node's, say):
    /// a lookup, not a walk over the fleet.
    pub fn quarantined_in<R: std::ops::RangeBounds<K>>(&self, range: R) -> impl Iterator<Item = (&K, &Quarantine)> {
        self.tracks.range(range).filter_map(|(k, t)| Some((k, t.quarantine.as_ref()?)))
    }

    /// Puts back a quarantine a control plane kept (after a restart or a
    /// take-over), with the faults it counted.
    pub fn restore(&mut self, key: K, q: Quarantine, faults: Vec<Time>) {
        let t = self.tracks.entry(key).or_default();
        // Quiet is counted from its last fault, as before the restart.
        t.last_fault = faults.iter().copied().chain([q.since]).max();
        t.faults = faults;
        t.quarantine = Some(q);
    }

    /// Puts back the recent faults of a GPU in service (a fault within
    /// [`REPEAT_WINDOW`] of them is a repeat, across restarts too).
    pub fn restore_history(&mut self, key: K, faults: Vec<Time>) {
        self.tracks.entry(key).or_default().faults = faults;
    }

    /// When `key`'s fatal faults happened (kept with its quarantine).
    pub fn fault_times(&self, key: &K) -> Vec<Time> {
        self.tracks.get(key).map(|t| t.faults.clone()).unwrap_or_default()
    }

    /// GPUs in service with a fault within [`REPEAT_WINDOW`] of `now`, and its times.
    pub fn recent_history(&self, now: Time) -> impl Iterator<Item = (&K, Vec<Time>)> {
        self.tracks.iter().filter(|(_, t)| t.quarantine.is_none()).filter_map(move |(k, t)| {
            let recent: Vec<Time> = t.faults.iter().copied().filter(|at| now.since(*at) < REPEAT_WINDOW).collect();
            (!recent.is_empty()).then_some((k, recent))
        })
    }
}
