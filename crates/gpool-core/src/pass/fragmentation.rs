//! Fragmentation-aware placement: the FGD measure of Weng et al., "Beware of
//! Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation
//! Gradient Descent" (USENIX ATC'23), §4.
//!
//! A node's GPU capacity is *fragmented* for a kind of request when that
//! request cannot use it: all of the node's unallocated GPU when the request
//! does not fit the node at all (too few CPUs, no GPU with room), else the
//! unallocated part of every GPU too small for it (a GPU with less left than
//! the share asked for; a partly used GPU for a whole-GPU request). The
//! node's fragmentation is that amount averaged over the mix of requests the
//! cluster sees, weighted by how often each kind arrives. FGD places a job
//! where its placement makes fragmentation grow least.
//!
//! The mix is learned from the jobs submitted to the snapshot: the shell
//! needs to configure nothing, and the simulator, replaying a trace, learns
//! the trace's mix as the daemon would.

use crate::model::job::{GpuRequest, JobSpec};

/// The kinds of request considered at most (the most frequent ones).
pub const MIX_CLASSES: usize = 32;

/// One kind of request, as far as fragmentation is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DemandClass {
    /// Whole GPUs (0 for a share or CPU-only work).
    pub gpus: u32,
    /// The share of one GPU in thousandths (0 for whole GPUs and CPU-only work).
    pub milli: u16,
    /// The CPU ask rounded up to a power of two cores: whether a node's
    /// free GPUs are usable depends on the CPUs left beside them, and an
    /// average over all the CPU asks of a class would hide that.
    pub cpu_bucket: u8,
}

/// `0` for no CPU, else ⌈log2(cores)⌉ + 1, at most 8 (128 cores and more).
fn cpu_bucket(cpus_milli: u64) -> u8 {
    if cpus_milli == 0 {
        return 0;
    }
    let cores = cpus_milli.div_ceil(1000).max(1);
    (64 - (cores - 1).leading_zeros() as u8 + 1).min(8)
}

/// How often each kind of request has arrived, with its average CPU ask.
#[derive(Clone, Debug, Default)]
pub struct DemandMix {
    /// (class, arrivals, CPU asked in all, milli-cores), most frequent first
    /// after [`DemandMix::record`] re-sorts.
    classes: Vec<(DemandClass, u64, u64)>,
    total: u64,
}

impl DemandClass {
    /// The class of a job's replica, or `None` for MIG requests (they never use a whole GPU).
    pub fn of(spec: &JobSpec) -> Option<DemandClass> {
        let cpu_bucket = cpu_bucket(spec.replica.cpus_milli);
        let (gpus, milli) = match &spec.replica.gpu {
            GpuRequest::None => (0, 0),
            GpuRequest::Gpus { count } => (*count, 0),
            GpuRequest::Memory { count, .. } if *count > 1 => (*count, 0),
            GpuRequest::Memory { .. } | GpuRequest::Mig { .. } => return None,
            // A memory-only share's compute share depends on the GPU: a quarter is typical.
            GpuRequest::Share { milli, .. } => (0, milli.unwrap_or(250).clamp(1, 1000)),
        };
        Some(DemandClass { gpus, milli, cpu_bucket })
    }
}

impl DemandMix {
    /// Counts one arriving job.
    pub fn record(&mut self, spec: &JobSpec) {
        let Some(class) = DemandClass::of(spec) else { return };
        let cpus = spec.replica.cpus_milli;
        match self.classes.iter().position(|(c, _, _)| *c == class) {
            Some(i) => {
                self.classes[i].1 += 1;
                self.classes[i].2 = self.classes[i].2.saturating_add(cpus);
                // Keep the most frequent first: one step up is enough per arrival.
                if i > 0 && self.classes[i - 1].1 < self.classes[i].1 {
                    self.classes.swap(i - 1, i);
                }
            }
            None => self.classes.push((class, 1, cpus)),
        }
        self.total += 1;
    }

    /// Whether any job has arrived yet.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// The most frequent classes: (class, arrivals, average CPU ask).
    pub fn top(&self) -> impl Iterator<Item = (DemandClass, u64, u64)> + '_ {
        self.classes.iter().take(MIX_CLASSES).map(|&(c, n, cpu)| (c, n, cpu / n.max(1)))
    }
}

/// GPU capacity of one node that `class` cannot use, in thousandths of a GPU.
/// `left` holds each whole GPU's unallocated share (1000 = free, 0 = held
/// whole or full); `cpus_free` the node's free CPU (milli-cores).
pub fn fragment(left: &[u16], cpus_free: u64, class: DemandClass, cpus_asked: u64) -> u64 {
    let total: u64 = left.iter().map(|&l| u64::from(l)).sum();
    if total == 0 {
        return 0;
    }
    if cpus_free < cpus_asked {
        return total;
    }
    let below = |need: u16| left.iter().filter(|&&l| l < need).map(|&l| u64::from(l)).sum::<u64>();
    match (class.gpus, class.milli) {
        (0, 0) => 0,
        (0, share) => {
            if left.iter().any(|&l| l >= share) {
                below(share)
            } else {
                total
            }
        }
        (k, _) => {
            if left.iter().filter(|&&l| l == 1000).count() as u64 >= u64::from(k) {
                below(1000)
            } else {
                total
            }
        }
    }
}

/// The node's fragmentation under the mix, weighted by arrivals (divide by
/// the total arrivals for thousandths of a GPU: only differences matter).
pub fn node_fragmentation(mix: &DemandMix, left: &[u16], cpus_free: u64) -> u64 {
    mix.top().map(|(class, n, cpus)| n.saturating_mul(fragment(left, cpus_free, class, cpus))).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUARTER: DemandClass = DemandClass { gpus: 0, milli: 250, cpu_bucket: 1 };
    const HALF: DemandClass = DemandClass { gpus: 0, milli: 500, cpu_bucket: 1 };
    const ONE: DemandClass = DemandClass { gpus: 1, milli: 0, cpu_bucket: 1 };

    #[test]
    fn fragments_are_the_capacity_a_request_cannot_use() {
        let cases: &[(&[u16], u64, DemandClass, u64, u64)] = &[
            // (left per GPU, free CPU, class, CPU asked, fragment)
            (&[1000, 1000], 8000, ONE, 1000, 0),
            (&[1000, 300], 8000, ONE, 1000, 300),
            (&[1000, 300], 8000, HALF, 1000, 300),
            (&[1000, 300], 8000, QUARTER, 1000, 0),
            (&[200, 300], 8000, HALF, 1000, 500), // fits nowhere: everything
            (&[200, 300], 8000, ONE, 1000, 500),
            (&[1000, 1000], 500, QUARTER, 1000, 2000), // not enough CPU
            (&[0, 0], 0, ONE, 1000, 0),
            (&[1000, 1000], 8000, DemandClass { gpus: 0, milli: 0, cpu_bucket: 1 }, 1000, 0),
        ];
        for (i, &(left, cpus, class, asked, want)) in cases.iter().enumerate() {
            assert_eq!(fragment(left, cpus, class, asked), want, "case {i}: {left:?} {class:?}");
        }
    }

    #[test]
    fn cpu_asks_fall_in_power_of_two_buckets() {
        let cases =
            [(0, 0), (500, 1), (1000, 1), (1500, 2), (2000, 2), (3000, 3), (8000, 4), (12_000, 5), (500_000, 8)];
        for (milli, bucket) in cases {
            assert_eq!(cpu_bucket(milli), bucket, "{milli}");
        }
    }

    #[test]
    fn a_quarter_on_a_shared_gpu_fragments_less_than_on_a_free_one() {
        let mut mix = DemandMix::default();
        let mut spec = JobSpec::new("u", crate::model::time::Time::MIN);
        spec.replica.gpu = GpuRequest::Gpus { count: 1 };
        for _ in 0..3 {
            mix.record(&spec);
        }
        spec.replica.gpu = GpuRequest::Share { milli: Some(250), memory_mb: None };
        mix.record(&spec);
        // A node with one free GPU and one with half left.
        let before = node_fragmentation(&mix, &[1000, 500], 8000);
        let on_free = node_fragmentation(&mix, &[750, 500], 8000) as i64 - before as i64;
        let on_shared = node_fragmentation(&mix, &[1000, 250], 8000) as i64 - before as i64;
        assert!(on_shared < on_free, "{on_shared} vs {on_free}");
    }
}
