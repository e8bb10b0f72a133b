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
//!
//! A kind of request also has a *reach*: the GPU models and nodes it may run
//! on (`--gpu-model`, the accelerator kind, a node selector, required
//! affinity). Every unallocated GPU it cannot reach is a fragment for it, as
//! in the paper's model, so placing other work on a model a constrained kind
//! cannot use fragments less than taking the GPUs it needs.

use crate::model::job::{GpuRequest, JobSpec, SpotPolicy};
use crate::model::node::Node;
use crate::model::resources::DeviceKind;

/// The kinds of request told apart at most. Kinds first seen once this
/// many are known are not counted: a cluster has a few dozen.
pub const MAX_KINDS: usize = 4096;

/// Distinct reaches told apart at most; later ones count as unconstrained,
/// which only makes the measure less precise for them.
pub const MAX_REACHES: usize = 64;

/// One kind of request, as far as fragmentation is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DemandClass {
    /// Whole GPUs (0 for a share or CPU-only work).
    pub gpus: u32,
    /// The share of one GPU in thousandths (0 for whole GPUs and CPU-only work).
    pub milli: u16,
    /// The CPU ask in tenths of a core, rounded up: whether a node's free
    /// GPUs are usable depends on the CPUs left beside them, and only the
    /// ask itself tells (12 cores left take an ask of 11.3, not of 12.5).
    /// Power-of-two buckets of asks, averaged, did worse on the list tuned
    /// on (BENCHMARKS.md, "Fragmentation by reach").
    pub cpu_tenths: u32,
    /// Index into the mix's reaches; 0 is "anywhere".
    pub reach: u16,
}

/// Where a kind of request may run, as far as its placement constraints say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reach {
    /// A job with only the constraints: the snapshot's own checks
    /// (`node_matches`, `kind_allows`, `model_allows`) answer for it.
    spec: JobSpec,
}

impl Reach {
    fn of(spec: &JobSpec) -> Reach {
        let mut only = JobSpec::new("", crate::model::time::Time::MIN);
        only.node_selector = spec.node_selector.clone();
        only.affinity.required = spec.affinity.required.clone();
        if spec.spot == SpotPolicy::Never {
            only.spot = SpotPolicy::Never;
        }
        if spec.replica.gpu != GpuRequest::None {
            only.replica.gpu_model = spec.replica.gpu_model.clone();
            only.replica.gpu_kind = spec.replica.gpu_kind;
        }
        Reach { spec: only }
    }

    /// Whether the reach may use `node` at all.
    pub fn node(&self, node: &Node) -> bool {
        self.spec.node_matches(node)
    }

    /// Whether the reach may use a GPU of this model and kind.
    pub fn model(&self, name: &str, kind: DeviceKind) -> bool {
        self.spec.kind_allows(kind) && self.spec.model_allows(name)
    }
}

/// A CPU ask in tenths of a core, rounded up.
fn cpu_tenths(cpus_milli: u64) -> u32 {
    u32::try_from(cpus_milli.div_ceil(100)).unwrap_or(u32::MAX)
}

/// How often each kind of request has arrived: every kind, grouped by what
/// it asks of GPUs and where it may run, then by its CPU ask. A node's
/// fragmentation then costs one look at its GPUs per group, whatever the
/// number of distinct CPU asks (kinds whose GPU ask and reach are alike
/// differ only in whether their CPU still fits).
#[derive(Clone, Debug)]
pub struct DemandMix {
    groups: Vec<Group>,
    kinds: usize,
    /// The reaches seen, the unconstrained one first.
    reaches: Vec<Reach>,
    total: u64,
}

/// The kinds of one GPU ask and reach ([`DemandClass`] with `cpu_tenths` 0):
/// (CPU ask in tenths of a core, arrivals of this ask and all smaller ones),
/// ascending by ask, so that the arrivals whose CPU fits are one look-up.
#[derive(Clone, Debug)]
struct Group {
    gpus: DemandClass,
    asks: Vec<(u32, u64)>,
}

impl Default for DemandMix {
    fn default() -> DemandMix {
        let anywhere = Reach::of(&JobSpec::new("", crate::model::time::Time::MIN));
        DemandMix { groups: Vec::new(), kinds: 0, reaches: vec![anywhere], total: 0 }
    }
}

impl DemandClass {
    /// The class of a job's replica (reach 0), or `None` for MIG requests (they never use a whole GPU).
    pub fn of(spec: &JobSpec) -> Option<DemandClass> {
        let cpu_tenths = cpu_tenths(spec.replica.cpus_milli);
        let (gpus, milli) = match &spec.replica.gpu {
            GpuRequest::None => (0, 0),
            GpuRequest::Gpus { count } => (*count, 0),
            GpuRequest::Memory { count, .. } if *count > 1 => (*count, 0),
            GpuRequest::Memory { .. } | GpuRequest::Mig { .. } => return None,
            // A memory-only share's compute share depends on the GPU: a quarter is typical.
            GpuRequest::Share { milli, .. } => (0, milli.unwrap_or(250).clamp(1, 1000)),
        };
        Some(DemandClass { gpus, milli, cpu_tenths, reach: 0 })
    }
}

impl DemandMix {
    /// Counts one arriving job.
    pub fn record(&mut self, spec: &JobSpec) {
        let Some(mut class) = DemandClass::of(spec) else { return };
        let reach = Reach::of(spec);
        class.reach = match self.reaches.iter().position(|r| *r == reach) {
            Some(i) => i as u16,
            None if self.reaches.len() < MAX_REACHES => {
                self.reaches.push(reach);
                (self.reaches.len() - 1) as u16
            }
            None => 0,
        };
        let gpus = DemandClass { cpu_tenths: 0, ..class };
        let g = match self.groups.iter().position(|g| g.gpus == gpus) {
            Some(g) => g,
            None if self.kinds < MAX_KINDS => {
                self.groups.push(Group { gpus, asks: Vec::new() });
                self.groups.len() - 1
            }
            None => return,
        };
        let asks = &mut self.groups[g].asks;
        let i = match asks.binary_search_by_key(&class.cpu_tenths, |&(t, _)| t) {
            Ok(i) => i,
            Err(_) if self.kinds >= MAX_KINDS => return,
            Err(i) => {
                let below = if i > 0 { asks[i - 1].1 } else { 0 };
                asks.insert(i, (class.cpu_tenths, below));
                self.kinds += 1;
                i
            }
        };
        for (_, upto) in &mut asks[i..] {
            *upto += 1;
        }
        self.total += 1;
    }

    /// Whether any job has arrived yet.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Every kind counted, with its arrivals.
    pub fn kinds(&self) -> impl Iterator<Item = (DemandClass, u64)> + '_ {
        self.groups.iter().flat_map(|g| {
            g.asks.iter().enumerate().map(|(i, &(cpu_tenths, upto))| {
                let below = if i > 0 { g.asks[i - 1].1 } else { 0 };
                (DemandClass { cpu_tenths, ..g.gpus }, upto - below)
            })
        })
    }

    /// The reaches, indexed by [`DemandClass::reach`].
    pub fn reaches(&self) -> &[Reach] {
        &self.reaches
    }
}

/// What one reach may use on one node: `None` when the node is out of its
/// reach, else the mask of whole-GPU slots of models it may use.
pub type Usable = Option<u64>;

/// GPU capacity of one node that `class` cannot use, in thousandths of a GPU.
/// `left` holds each whole GPU's unallocated share (1000 = free, 0 = held
/// whole or full); `usable` what the class's reach may use there;
/// `cpus_free` the node's free CPU (milli-cores).
pub fn fragment(left: &[u16], usable: Usable, cpus_free: u64, class: DemandClass, cpus_asked: u64) -> u64 {
    let total: u64 = left.iter().map(|&l| u64::from(l)).sum();
    if total == 0 {
        return 0;
    }
    let Some(mask) = usable else { return total };
    if cpus_free < cpus_asked {
        return total;
    }
    // The capacity of the GPUs the class may use that hold at least `need`.
    let usable_at = |need: u16| {
        left.iter()
            .enumerate()
            .filter(|&(slot, &l)| mask >> slot & 1 == 1 && l >= need)
            .fold((0u64, 0u64), |(n, sum), (_, &l)| (n + 1, sum + u64::from(l)))
    };
    match (class.gpus, class.milli) {
        (0, 0) => 0,
        (0, share) => match usable_at(share) {
            (0, _) => total,
            (_, room) => total - room,
        },
        (k, _) => match usable_at(1000) {
            (free, room) if free >= u64::from(k) => total - room,
            _ => total,
        },
    }
}

/// The node's fragmentation under the mix, weighted by arrivals (divide by
/// the total arrivals for thousandths of a GPU: only differences matter).
/// `usable` is indexed by reach ([`DemandMix::reaches`]).
pub fn node_fragmentation(mix: &DemandMix, left: &[u16], usable: &[Usable], cpus_free: u64) -> u64 {
    let total: u64 = left.iter().map(|&l| u64::from(l)).sum();
    if total == 0 {
        return 0;
    }
    let mut sum = 0u64;
    for g in &mix.groups {
        let reach = usable.get(usize::from(g.gpus.reach)).copied().unwrap_or(Some(u64::MAX));
        let Some(&(_, arrivals)) = g.asks.last() else { continue };
        // What the group cannot use with CPU to spare; all of it where its CPU does not fit.
        let by_gpus = if reach.is_some() { fragment(left, reach, u64::MAX, g.gpus, 0) } else { total };
        let fit = g.asks.partition_point(|&(tenths, _)| u64::from(tenths) * 100 <= cpus_free);
        let fitting = if fit > 0 { g.asks[fit - 1].1 } else { 0 };
        sum = sum
            .saturating_add(fitting.saturating_mul(by_gpus))
            .saturating_add((arrivals - fitting).saturating_mul(total));
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::model::resources::DeviceKind;

    const QUARTER: DemandClass = DemandClass { gpus: 0, milli: 250, cpu_tenths: 10, reach: 0 };
    const HALF: DemandClass = DemandClass { gpus: 0, milli: 500, cpu_tenths: 10, reach: 0 };
    const ONE: DemandClass = DemandClass { gpus: 1, milli: 0, cpu_tenths: 10, reach: 0 };
    const CPU: DemandClass = DemandClass { gpus: 0, milli: 0, cpu_tenths: 10, reach: 0 };
    const ALL: Usable = Some(u64::MAX);

    #[test]
    fn fragments_are_the_capacity_a_request_cannot_use() {
        let cases: &[(&[u16], Usable, u64, DemandClass, u64, u64)] = &[
            // (left per GPU, GPUs in reach, free CPU, class, CPU asked, fragment)
            (&[1000, 1000], ALL, 8000, ONE, 1000, 0),
            (&[1000, 300], ALL, 8000, ONE, 1000, 300),
            (&[1000, 300], ALL, 8000, HALF, 1000, 300),
            (&[1000, 300], ALL, 8000, QUARTER, 1000, 0),
            (&[200, 300], ALL, 8000, HALF, 1000, 500), // fits nowhere: everything
            (&[200, 300], ALL, 8000, ONE, 1000, 500),
            (&[1000, 1000], ALL, 500, QUARTER, 1000, 2000), // not enough CPU
            (&[0, 0], ALL, 0, ONE, 1000, 0),
            (&[1000, 1000], ALL, 8000, CPU, 1000, 0),
            // Out of reach: the node, or the one GPU model that would do.
            (&[1000, 1000], None, 8000, ONE, 1000, 2000),
            (&[1000, 1000], None, 8000, CPU, 1000, 2000),
            (&[1000, 600], Some(0b10), 8000, ONE, 1000, 1600),
            (&[1000, 600], Some(0b10), 8000, HALF, 1000, 1000),
            (&[1000, 600], Some(0b01), 8000, HALF, 1000, 600),
            (&[1000, 1000, 1000], Some(0b011), 8000, DemandClass { gpus: 2, ..ONE }, 1000, 1000),
            (&[1000, 1000, 1000], Some(0b001), 8000, DemandClass { gpus: 2, ..ONE }, 1000, 3000),
        ];
        for (i, &(left, usable, cpus, class, asked, want)) in cases.iter().enumerate() {
            assert_eq!(fragment(left, usable, cpus, class, asked), want, "case {i}: {left:?} {usable:?} {class:?}");
        }
    }

    #[test]
    fn jobs_bound_to_a_model_or_label_have_their_own_reach() {
        let mut mix = DemandMix::default();
        let mut spec = JobSpec::new("u", crate::model::time::Time::MIN);
        spec.replica.gpu = GpuRequest::Gpus { count: 1 };
        mix.record(&spec);
        spec.replica.gpu_model = Some("T4".into());
        mix.record(&spec);
        mix.record(&spec);
        spec.replica.gpu_model = None;
        spec.node_selector.insert("zone".into(), "a".into());
        mix.record(&spec);
        let reaches: Vec<(u16, u64)> = mix.kinds().map(|(c, n)| (c.reach, n)).collect();
        assert_eq!(reaches, [(0, 1), (1, 2), (2, 1)]);
        let r = mix.reaches();
        assert!(r[1].model("T4", DeviceKind::NvidiaGpu) && !r[1].model("V100M16", DeviceKind::NvidiaGpu));
        assert!(r[0].model("V100M16", DeviceKind::NvidiaGpu) && !r[0].model("v5e", DeviceKind::Tpu));
        let node = Node::with_gpus("n", 2, "T4", 16_000);
        assert!(r[0].node(&node) && r[1].node(&node) && !r[2].node(&node));
        // A CPU-only job's model is not a constraint on it.
        spec.replica.gpu = GpuRequest::None;
        spec.replica.gpu_model = Some("T4".into());
        spec.node_selector.clear();
        mix.record(&spec);
        assert_eq!(mix.reaches().len(), 3);
    }

    #[test]
    fn cpu_asks_are_told_apart_to_a_tenth_of_a_core() {
        let cases = [(0, 0), (1, 1), (100, 1), (101, 2), (11_300, 113), (12_500, 125), (u64::MAX, u32::MAX)];
        for (milli, tenths) in cases {
            assert_eq!(cpu_tenths(milli), tenths, "{milli}");
        }
    }

    proptest::proptest! {
        /// Grouping the kinds is only a way to compute the sum: the node's
        /// fragmentation is each kind's fragment weighted by its arrivals.
        #[test]
        fn a_nodes_fragmentation_is_the_weighted_sum_of_its_kinds_fragments(
            kinds in proptest::collection::vec((0u32..3, 0u16..1001, 0u64..20_000, 0usize..3), 1..40),
            left in proptest::collection::vec(0u16..1001, 1..9),
            cpus_free_tenths in 0u64..240,
            masks in proptest::collection::vec(proptest::option::of(0u64..512), 3),
        ) {
            // On tenths of a core, as asks are: a CPU ask that just fits is a case to see.
            let cpus_free = cpus_free_tenths * 100;
            let mut mix = DemandMix::default();
            for &(gpus, milli, cpus, reach) in &kinds {
                let mut spec = JobSpec::new("u", crate::model::time::Time::MIN);
                spec.replica.cpus_milli = cpus;
                spec.replica.gpu = match (gpus, milli) {
                    (0, 0) => GpuRequest::None,
                    (0, m) => GpuRequest::Share { milli: Some(m), memory_mb: None },
                    (g, _) => GpuRequest::Gpus { count: g },
                };
                if reach > 0 && gpus + u32::from(milli) > 0 {
                    spec.replica.gpu_model = Some(format!("M{reach}").into());
                }
                mix.record(&spec);
            }
            let usable: Vec<Usable> = (0..mix.reaches().len()).map(|r| if r == 0 { ALL } else { masks[r] }).collect();
            let want: u64 = mix
                .kinds()
                .map(|(c, n)| n * fragment(&left, usable[usize::from(c.reach)], cpus_free, c, u64::from(c.cpu_tenths) * 100))
                .sum();
            proptest::prop_assert_eq!(node_fragmentation(&mix, &left, &usable, cpus_free), want);
            proptest::prop_assert_eq!(mix.kinds().map(|(_, n)| n).sum::<u64>(), kinds.len() as u64);
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
        let all = [ALL];
        let before = node_fragmentation(&mix, &[1000, 500], &all, 8000);
        let on_free = node_fragmentation(&mix, &[750, 500], &all, 8000) as i64 - before as i64;
        let on_shared = node_fragmentation(&mix, &[1000, 250], &all, 8000) as i64 - before as i64;
        assert!(on_shared < on_free, "{on_shared} vs {on_free}");
    }
}
