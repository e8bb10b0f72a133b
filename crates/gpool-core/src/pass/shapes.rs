//! Pending jobs grouped by what decides whether they can be placed: the
//! scheduler tries few jobs per base shape that failed.

use std::sync::Arc;

use crate::model::job::{GpuRequest, NodeAffinity};
use crate::model::node::Labels;
use crate::model::resources::DeviceKind;
use crate::pass::intern::Interner;

/// Everything except CPU, memory and the preemption key that decides whether
/// a pending job can be placed or can preempt (dependencies and back-off
/// aside). Jobs of one base shape that need at least as much CPU and memory
/// as one that failed, and are no more deserving of preemption, fail too, so
/// a pass tries few jobs per failing base shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct BaseShape {
    pub(crate) gpu: GpuRequest,
    pub(crate) gpu_model: Option<Arc<str>>,
    pub(crate) gpu_kind: Option<DeviceKind>,
    /// All replicas on nodes that share this label's value (a TPU slice).
    pub(crate) same_label: Option<Arc<str>>,
    pub(crate) replicas: u32,
    pub(crate) node_selector: Labels,
    pub(crate) affinity: NodeAffinity,
    pub(crate) anti_affinity: Vec<Labels>,
    pub(crate) has_labels: bool,
    pub(crate) priority: i32,
    pub(crate) queue: Arc<str>,
}

/// A base shape plus the host resources of one replica.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Shape {
    pub(crate) base: u32,
    pub(crate) cpus_milli: u64,
    pub(crate) memory_mb: u64,
}

/// The shapes of the pending jobs, two levels deep.
#[derive(Clone, Debug, Default)]
pub(crate) struct Shapes {
    pub(crate) bases: Interner<BaseShape>,
    pub(crate) shapes: Interner<Shape>,
}

impl Shapes {
    pub(crate) fn acquire(&mut self, base: BaseShape, cpus_milli: u64, memory_mb: u64) -> u32 {
        // A base is referenced once per distinct shape built on it.
        let base = self.bases.acquire(base);
        let id = self.shapes.acquire(Shape { base, cpus_milli, memory_mb });
        if self.shapes.refs(id) > 1 {
            self.bases.release(base);
        }
        id
    }

    pub(crate) fn release(&mut self, id: u32) {
        if let Some(shape) = self.shapes.release(id) {
            self.bases.release(shape.base);
        }
    }

    pub(crate) fn get(&self, id: u32) -> Option<(&Shape, &BaseShape)> {
        let s = self.shapes.get(id)?;
        Some((s, self.bases.get(s.base)?))
    }
}
