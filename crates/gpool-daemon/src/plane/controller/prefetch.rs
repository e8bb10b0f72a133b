//! Pulls ahead: a job that preempted others waits for their grace periods
//! on the nodes the pass nominated for it (`Plan::nominated`); its image is
//! pulled there meanwhile, with its owner's registry login, so that it
//! starts the moment the GPUs are free. Each (job, node) is ordered once.

use std::collections::{BTreeMap, BTreeSet};

use gpool_core::{NodeId, Plan};

use super::Order;
use super::acts::Acts;
use super::docs::JobDoc;
use super::registries::Logins;

/// The (job, node) pairs whose image was ordered pulled ahead.
#[derive(Debug, Default)]
pub(super) struct Prefetched(BTreeSet<(u64, NodeId)>);

impl Prefetched {
    pub(super) fn on_plan(&mut self, plan: &Plan, jobs: &BTreeMap<u64, JobDoc>, logins: &Logins) -> Acts {
        let mut acts = Acts::default();
        for (job, placement) in &plan.nominated {
            let Some(doc) = jobs.get(&job.0) else { continue };
            let Some(image) = doc.spec.image.clone() else { continue };
            let auth = logins.auth(&doc.user, &image).map(crate::protocol::Secret);
            let nodes: BTreeSet<NodeId> = placement.iter().map(|r| r.node).collect();
            for node in nodes {
                if self.0.insert((job.0, node)) {
                    acts.order(node, Order::Prefetch { image: image.clone(), registry_auth: auth.clone() });
                }
            }
        }
        self.0.retain(|(j, _)| jobs.get(j).is_some_and(|d| d.state == gpool_api::JobState::Pending));
        acts
    }
}
