//! What the agent does for the control plane's GPU fault handling
//! (`plane/controller/faults.rs`): injects faults into simulated GPUs, and
//! runs the node's health-check program on a quarantined GPU.
//!
//! The program is the operator's (`--health-check`, like Slurm's
//! HealthCheckProgram), run with this daemon's account and a fixed
//! environment (never a job's): `PATH` and the locale of the daemon, plus
//! `CUDA_VISIBLE_DEVICES`, `NVIDIA_VISIBLE_DEVICES`, `GPOOL_GPU_INDEX` and
//! `GPOOL_GPU_UUID` naming the GPU. Exit 0 within its time limit passes.

use gpool_api::agent::HealthVerdict;
use gpool_gpu::tool::{ToolFailure, run_command};

use super::Agent;
use crate::node::sampler::SamplerCtl;
use crate::protocol::{AgentReport, NodeReport};

/// The most of a check's output kept with its verdict.
const OUTPUT_KEPT: usize = 2048;

impl Agent {
    /// Shows (or clears) a fault on a simulated GPU, from the next sample on.
    pub fn inject_fault(&self, gpu: u32, fault: Option<gpool_gpu::InjectedFault>) {
        let sent = self.cfg.sampler.as_ref().is_some_and(|s| s.send(SamplerCtl::Fault { gpu, fault }).is_ok());
        if !sent {
            tracing::warn!("cannot inject a fault into GPU {gpu}: this node has no GPU backend");
        }
    }

    /// Checks quarantined GPU `gpu`; the verdict goes back with a report.
    pub fn check_health(&self, gpu: u32, uuid: String) {
        let reports = self.reports.clone();
        let node = self.cfg.node.clone();
        let Some((program, timeout)) = self.cfg.health_check.clone() else {
            let output = "no health-check program on this node (--health-check)".to_string();
            report(&reports, node, HealthVerdict { gpu, program: false, passed: false, output });
            return;
        };
        let running = self.checking.clone();
        if !running.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(gpu) {
            // Its verdict will answer this order too.
            tracing::info!("health check of GPU {gpu}: one is running already");
            return;
        }
        std::thread::spawn(move || {
            let mut cmd = std::process::Command::new(&program);
            cmd.env_clear().envs(crate::node::handover::root_env());
            for var in ["CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "GPOOL_GPU_UUID"] {
                cmd.env(var, &uuid);
            }
            cmd.env("GPOOL_GPU_INDEX", gpu.to_string());
            let (passed, output) = match run_command(cmd, timeout) {
                Ok(out) => (true, out),
                Err(ToolFailure::Failed { code, status, message }) => {
                    (false, ToolFailure::exit_text(code, &status, &message))
                }
                Err(ToolFailure::Timeout) => (false, format!("no verdict within {} s; killed it", timeout.as_secs())),
                Err(ToolFailure::NotFound) => (false, format!("{} not found", program.display())),
                Err(ToolFailure::Spawn(e)) => (false, format!("cannot run {}: {e}", program.display())),
            };
            running.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&gpu);
            let output = tail(output.trim());
            tracing::info!("health check of GPU {gpu}: {} ({output})", if passed { "passed" } else { "failed" });
            report(&reports, node, HealthVerdict { gpu, program: true, passed, output });
        });
    }
}

fn report(reports: &crate::node::agent::ReportSink, node: String, v: HealthVerdict) {
    let at_ms = crate::node::clock::wall_ms();
    reports(AgentReport::Telemetry(NodeReport { node, at_ms, health: vec![v], ..NodeReport::default() }));
}

/// The last [`OUTPUT_KEPT`] bytes, cut at a character boundary.
fn tail(s: &str) -> String {
    let mut start = s.len().saturating_sub(OUTPUT_KEPT);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    s[start..].to_string()
}
