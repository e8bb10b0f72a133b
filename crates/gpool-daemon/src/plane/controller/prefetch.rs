//! Pulls ahead: a job that preempted others waits for their grace periods
//! on the nodes the pass nominated for it (`Plan::nominated`); its image is
//! pulled there meanwhile, with its owner's registry login, so that it
//! starts the moment the GPUs are free. Each (job, node) is ordered once.

use std::collections::BTreeSet;

use gpool_core::{NodeId, Plan};

use super::{Controller, Order};

impl Controller {
    pub(super) fn prefetch_images(&mut self, plan: &Plan) {
        let mut orders = Vec::new();
        for (job, placement) in &plan.nominated {
            let Some(doc) = self.jobs.get(&job.0) else { continue };
            let Some(image) = doc.spec.image.clone() else { continue };
            let auth = self.registry_auth(&doc.user, &image).map(crate::protocol::Secret);
            let nodes: BTreeSet<NodeId> = placement.iter().map(|r| r.node).collect();
            for node in nodes {
                if self.prefetched.insert((job.0, node)) {
                    orders.push((node, Order::Prefetch { image: image.clone(), registry_auth: auth.clone() }));
                }
            }
        }
        for (node, order) in orders {
            self.order(node, order);
        }
        let jobs = &self.jobs;
        self.prefetched.retain(|(j, _)| jobs.get(j).is_some_and(|d| d.state == gpool_api::JobState::Pending));
    }
}
