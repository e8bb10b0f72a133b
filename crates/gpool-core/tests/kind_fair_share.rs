//! Issue 22: fair share weighs each accelerator kind apart. A job's factor
//! counts its user's use of the kinds it may run on: TPU hours do not push a
//! team back on GPUs, and a job for any GPU answers for every GPU kind.

mod common;

use common::*;
use gpool_core::DeviceKind::{AmdGpu, NvidiaGpu, Tpu};

fn started(plan: &gpool_core::Plan) -> Vec<u64> {
    plan.starts.iter().map(|s| s.job.0).collect()
}

fn fleet(policy: &str) -> Cluster {
    Cluster::new(policy)
        .node_of_kind("nv", 2, "H100-80GB", NvidiaGpu)
        .node_of_kind("amd", 2, "MI300X", AmdGpu)
        .node_of_kind("tpu", 4, "TPU-v5p", Tpu)
}

#[test]
fn tpu_hours_do_not_push_a_user_back_on_gpus() {
    let mut c = fleet("default");
    // tpu-heavy has held four TPU chips for ten hours; gpu-light one GPU for one hour.
    let h = c.run(job("tpu-heavy").kind(Tpu).gpus(4), t(0));
    let l = c.run(job("gpu-light").kind(NvidiaGpu).gpus(1), t(0));
    c.finish(l, t(3_600));
    c.finish(h, t(36_000));
    let light = c.submit(job("gpu-light").kind(NvidiaGpu).gpus(2).at(36_000));
    let heavy = c.submit(job("tpu-heavy").kind(NvidiaGpu).gpus(2).at(36_001));
    let plan = c.plan(t(36_002));
    assert_eq!(
        started(&plan),
        vec![heavy.0],
        "on NVIDIA GPUs tpu-heavy has used nothing; gpu-light waits: {}",
        c.reason(&plan, light)
    );
    // On TPUs it is the other way round.
    c.apply(&plan);
    let heavy_tpu = c.submit(job("tpu-heavy").kind(Tpu).gpus(4).at(36_003));
    let light_tpu = c.submit(job("gpu-light").kind(Tpu).gpus(4).at(36_004));
    let plan = c.plan(t(36_005));
    assert_eq!(started(&plan), vec![light_tpu.0], "tpu-heavy waits: {}", c.reason(&plan, heavy_tpu));
}

#[test]
fn an_any_gpu_job_answers_for_every_gpu_kind_and_not_for_tpus() {
    let mut c = fleet("default");
    let a = c.run(job("amd-heavy").kind(AmdGpu).gpus(2), t(0));
    let n = c.run(job("nv-light").kind(NvidiaGpu).gpus(1), t(0));
    let tp = c.run(job("tpu-only").kind(Tpu).gpus(4), t(0));
    c.finish(n, t(3_600));
    c.finish(a, t(36_000));
    c.finish(tp, t(72_000));
    // Every GPU is free; two any-GPU jobs of two GPUs each fit, a third does not.
    let heavy = c.submit(job("amd-heavy").gpus(2).at(72_000));
    let light = c.submit(job("nv-light").gpus(2).at(72_001));
    let tpu_user = c.submit(job("tpu-only").gpus(2).at(72_002));
    let plan = c.plan(t(72_003));
    let mut first = started(&plan);
    first.sort_unstable();
    assert_eq!(first, vec![light.0, tpu_user.0], "amd-heavy's AMD hours count for any GPU: {}", c.reason(&plan, heavy));
}

#[test]
fn max_min_fairness_counts_what_a_user_holds_of_the_kinds_a_job_may_use() {
    let mut c = fleet("fair");
    c.run(job("a").kind(Tpu).gpus(4).at(0), t(0));
    c.run(job("b").kind(NvidiaGpu).gpus(1).at(0), t(0));
    let b2 = c.submit(job("b").kind(NvidiaGpu).gpus(1).at(1));
    let a2 = c.submit(job("a").kind(NvidiaGpu).gpus(1).at(2));
    // One NVIDIA GPU is left: a holds none of them (its four chips are TPUs), b holds one.
    let plan = c.plan(t(3));
    assert_eq!(started(&plan), vec![a2.0], "b waits: {}", c.reason(&plan, b2));
}
