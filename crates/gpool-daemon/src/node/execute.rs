//! Carries out one command of the agent protocol (`gpool_api::agent::Command`)
//! on this node's agent: the remote node's side of what the control plane orders.

use std::path::PathBuf;

use gpool_api::agent as wire;

use crate::node::agent::Agent;
use crate::protocol::{AgentReport, Found, ReplicaKey};

pub(crate) fn execute(agent: &Agent, command: wire::Command) {
    match command {
        wire::Command::Start {
            replica,
            registry_auth,
            argv,
            env,
            cwd,
            devices,
            user,
            cpus_milli,
            memory_mb,
            image,
        } => {
            let key: ReplicaKey = replica.into();
            let launch = crate::protocol::Launch {
                argv,
                env,
                cwd: cwd.map(PathBuf::from).unwrap_or_default(),
                stdout: PathBuf::new(),
                stderr: PathBuf::new(),
                lease: None,
                log_limit: None,
                user,
                run_as: None,
                cpus_milli: cpus_milli.unwrap_or(0),
                memory_mb: memory_mb.unwrap_or(0),
                confine: None,
                image,
                registry_auth: registry_auth.map(crate::protocol::Secret),
                pull: None,
            };
            if let Err(e) = agent.start(key, launch, devices) {
                agent.report(AgentReport::StartFailed { key, error: format!("cannot start its shim: {e}") });
            }
        }
        wire::Command::Signal { replica, signal } => {
            if let Some(sig) = rustix::process::Signal::from_named_raw(signal) {
                agent.signal(replica.into(), sig);
            }
        }
        wire::Command::Reconcile { replica, devices } => {
            let key: ReplicaKey = replica.into();
            match agent.reconcile(key, devices) {
                Found::Adopted => agent.report(AgentReport::Running { key }),
                // Its exit record was found and reported.
                Found::Finished => {}
                // The control plane must hear it, or the run would wait forever.
                Found::Lost => agent.report(AgentReport::Lost {
                    key,
                    why: "the agent found neither its shim nor an exit record when told to reconcile it".into(),
                }),
            }
        }
        wire::Command::Kill { replica } => agent.kill(replica.into()),
        wire::Command::Profile { replica, profile, seconds, native } => {
            agent.profile(replica.into(), crate::protocol::ProfileOrder { profile, seconds, native });
        }
        wire::Command::Prefetch { image, registry_auth } => {
            agent.prefetch(image, registry_auth.map(crate::protocol::Secret));
        }
        wire::Command::InjectFault { gpu, fault } => {
            agent.inject_fault(gpu, fault.map(crate::protocol::fault_from_wire));
        }
        wire::Command::CheckHealth { gpu, uuid } => agent.check_health(gpu, uuid),
        wire::Command::MigLayout { gpu, layout } => agent.mig_layout(
            gpu,
            layout.into_iter().map(|s| gpool_gpu::MigSlot { profile: s.profile, start: s.start }).collect(),
        ),
    }
}
