//! EASY backfill: the earliest time the first blocked job could start, and
//! the resources it would start on.
//!
//! Running jobs are released in order of their planned end (start + estimate
//! or time limit); after each release only the nodes it touched are
//! re-examined, counting how many replicas of the blocked job each node
//! could take. The first release after which the count covers the gang is
//! the reservation. Jobs with no estimate never end for this purpose, so a
//! reservation behind them is "never" and its resources are off limits to
//! every backfilled job.

use std::collections::BTreeMap;

use crate::model::job::{Job, Placement, ReplicaPlacement};
use crate::model::node::NodeId;
use crate::model::time::Time;
use crate::pass::capacity::{Capacity, fit_on};
use crate::pass::snapshot::NodeFree;

/// A job holding resources and when it is planned to release them.
pub(crate) struct Release<'p> {
    pub(crate) at: Time,
    pub(crate) placement: &'p [ReplicaPlacement],
}

/// How many replicas of `job` fit on a node with `nf` free, at most `cap`.
fn replicas_fitting(c: &Capacity<'_>, n: u32, nf: &NodeFree, job: &Job, cap: u32) -> u32 {
    let e = &c.snap.nodes[n as usize];
    let mut f = nf.clone();
    let mut k = 0;
    while k < cap {
        let Some(fit) = fit_on(c.snap, e, &f, job) else {
            break;
        };
        f.take(&fit.replica(NodeId(n), &job.spec.replica));
        k += 1;
        if fit.gpus == 0 && fit.mig == 0 && job.spec.replica.cpus_milli == 0 && job.spec.replica.memory_mb == 0 {
            k = cap; // takes nothing: every replica fits
        }
    }
    k
}

/// The earliest (time, placement) at which `job` fits once `releases` have happened.
pub(crate) fn reserve(c: &Capacity<'_>, job: &Job, mut releases: Vec<Release<'_>>) -> Option<(Time, Placement)> {
    let want = job.spec.replicas;
    releases.sort_by_key(|r| r.at);
    let eligible: Vec<bool> = (0..c.free.len() as u32).map(|n| c.eligible(n, job)).collect();
    let mut over: BTreeMap<u32, NodeFree> = BTreeMap::new();
    let mut counts: BTreeMap<u32, u32> = BTreeMap::new();
    let mut total = 0u32;
    for n in 0..c.free.len() as u32 {
        if eligible[n as usize] {
            let k = replicas_fitting(c, n, &c.free[n as usize], job, want);
            if k > 0 {
                counts.insert(n, k);
                total += k;
            }
        }
    }
    for r in releases {
        for p in r.placement {
            let n = p.node.0;
            let f = over.entry(n).or_insert_with(|| c.free[n as usize].clone());
            f.release(p);
            f.exclude(c.snap.nodes[n as usize].out_of_service());
            if eligible.get(n as usize).copied().unwrap_or(false) {
                let k = replicas_fitting(c, n, f, job, want);
                let old = counts.insert(n, k).unwrap_or(0);
                total = total - old + k;
            }
        }
        if total >= want {
            return Some((r.at, place(c, job, &over, &counts)));
        }
    }
    None
}

/// Lays the replicas out on the nodes whose counts cover the gang, fullest first.
fn place(c: &Capacity<'_>, job: &Job, over: &BTreeMap<u32, NodeFree>, counts: &BTreeMap<u32, u32>) -> Placement {
    let mut nodes: Vec<(u32, u32)> = counts.iter().filter(|(_, k)| **k > 0).map(|(n, k)| (*n, *k)).collect();
    nodes.sort_by_key(|&(n, k)| (std::cmp::Reverse(k), n));
    let mut placement = Vec::new();
    for (n, k) in nodes {
        let e = &c.snap.nodes[n as usize];
        let mut f = over.get(&n).cloned().unwrap_or_else(|| c.free[n as usize].clone());
        for _ in 0..k {
            if placement.len() == job.spec.replicas as usize {
                return placement;
            }
            let Some(fit) = fit_on(c.snap, e, &f, job) else {
                break;
            };
            let r = fit.replica(NodeId(n), &job.spec.replica);
            f.take(&r);
            placement.push(r);
        }
    }
    placement
}
