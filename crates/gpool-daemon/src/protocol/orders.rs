//! Orders to a node in one form: the controller's, carried out by the agent
//! in this process as they are, and by a remote agent as the protocol
//! command this translates them to.

use gpool_api::agent as wire;
use rustix::process::Signal;

use super::{Launch, ProfileOrder, ReplicaKey, Secret};

/// An order to a node: carried out as it is by the agent in this process
/// (`gpool up`), sent to a remote agent as a protocol command (`command_of`).
#[derive(Debug, Clone, PartialEq)]
pub enum Order {
    /// Start a replica on these devices (GPU or MIG UUIDs).
    Start {
        key: ReplicaKey,
        launch: Box<Launch>,
        devices: Vec<String>,
    },
    Signal {
        key: ReplicaKey,
        signal: Signal,
    },
    /// After a restart: watch the replica again, or report it `Lost` if nothing runs it.
    Reconcile {
        key: ReplicaKey,
        devices: Vec<String>,
    },
    /// After a restart: the replica cannot be run any more; kill whatever is left of it.
    Abandon {
        key: ReplicaKey,
    },
    /// Lay MIG GPU `gpu` out as `layout` (`mig_layouts.rs`).
    MigLayout {
        gpu: u32,
        layout: Vec<gpool_gpu::MigSlot>,
    },
    /// Pull `image` now, for a job that will run here once its victims are gone (`prefetch.rs`).
    Prefetch {
        image: String,
        registry_auth: Option<Secret>,
    },
    /// Profile a replica (`profiles.rs`).
    Profile {
        key: ReplicaKey,
        order: ProfileOrder,
    },
    /// Show or clear a fault on a simulated GPU (`faults.rs`).
    InjectFault {
        gpu: u32,
        fault: Option<gpool_gpu::InjectedFault>,
    },
    /// Run the health check on a quarantined GPU (`faults.rs`).
    CheckHealth {
        gpu: u32,
        uuid: String,
    },
}

/// The protocol command a remote agent is sent for an order (`None`: remote agents need none).
pub fn command_of(order: Order) -> Option<wire::Command> {
    let cmd = match order {
        // A remote agent reconciles what it runs when it registers.
        Order::Reconcile { .. } => return None,
        Order::Abandon { key } => wire::Command::Kill { replica: key.into() },
        Order::Start { key, launch, devices } => {
            let launch = *launch;
            let cwd = (!launch.cwd.as_os_str().is_empty()).then(|| launch.cwd.display().to_string());
            wire::Command::Start {
                replica: key.into(),
                registry_auth: launch.registry_auth.map(|s| s.0),
                argv: launch.argv,
                env: launch.env,
                cwd,
                devices,
                user: launch.user,
                cpus_milli: (launch.cpus_milli > 0).then_some(launch.cpus_milli),
                memory_mb: (launch.memory_mb > 0).then_some(launch.memory_mb),
                image: launch.image,
            }
        }
        Order::Signal { key, signal } => wire::Command::Signal { replica: key.into(), signal: signal.as_raw() },
        Order::Prefetch { image, registry_auth } => {
            wire::Command::Prefetch { image, registry_auth: registry_auth.map(|s| s.0) }
        }
        Order::Profile { key, order } => wire::Command::Profile {
            replica: key.into(),
            profile: order.profile,
            seconds: order.seconds,
            native: order.native,
        },
        Order::MigLayout { gpu, layout } => wire::Command::MigLayout {
            gpu,
            layout: layout.into_iter().map(|s| wire::MigSlotWire { profile: s.profile, start: s.start }).collect(),
        },
        Order::InjectFault { gpu, fault } => {
            wire::Command::InjectFault { gpu, fault: fault.as_ref().map(crate::protocol::fault_to_wire) }
        }
        Order::CheckHealth { gpu, uuid } => wire::Command::CheckHealth { gpu, uuid },
    };
    Some(cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_order_has_its_command_and_only_reconcile_has_none() {
        let key = ReplicaKey { job: 7, attempt: 2, rank: 1 };
        let launch = Launch {
            argv: vec!["python".into(), "train.py".into()],
            cwd: "/work".into(),
            user: Some("ana".into()),
            cpus_milli: 4_000,
            registry_auth: Some(Secret("{}".into())),
            ..Launch::default()
        };
        let start = command_of(Order::Start { key, launch: Box::new(launch), devices: vec!["GPU-1".into()] });
        let Some(wire::Command::Start {
            replica, argv, cwd, devices, user, cpus_milli, memory_mb, registry_auth, ..
        }) = start
        else {
            panic!("a start is a start: {start:?}");
        };
        assert_eq!((replica.job, replica.attempt, replica.rank), (7, 2, 1));
        assert_eq!((argv.len(), cwd.as_deref(), devices.len(), user.as_deref()), (2, Some("/work"), 1, Some("ana")));
        assert_eq!((cpus_milli, memory_mb, registry_auth.as_deref()), (Some(4_000), None, Some("{}")));
        assert_eq!(command_of(Order::Reconcile { key, devices: Vec::new() }), None, "agents reconcile at registration");
        assert!(
            matches!(command_of(Order::Abandon { key }), Some(wire::Command::Kill { replica }) if replica.job == 7)
        );
        let signal = command_of(Order::Signal { key, signal: Signal::TERM });
        assert!(matches!(signal, Some(wire::Command::Signal { signal: 15, .. })), "{signal:?}");
    }
}
