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
    /// Connect an interactive replica's terminal to client session `session` (`node/agent/terminal.rs`).
    Attach {
        key: ReplicaKey,
        session: String,
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

/// The protocol command a remote agent is sent for an order.
pub fn command_of(order: Order) -> wire::Command {
    match order {
        Order::Reconcile { key, devices } => wire::Command::Reconcile { replica: key.into(), devices },
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
                tty_grace_ms: launch.tty_grace_ms,
            }
        }
        Order::Signal { key, signal } => wire::Command::Signal { replica: key.into(), signal: signal.as_raw() },
        Order::Attach { key, session } => wire::Command::Attach { replica: key.into(), session },
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
    }
}

/// The order a remote agent carries out for a protocol command (what
/// [`command_of`] made of it; what only a node knows of a launch is left to
/// the node: its log files, lease, account and pull step). `None`: a signal
/// number this node does not know, which it leaves alone.
pub fn order_of(command: wire::Command) -> Option<Order> {
    Some(match command {
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
            tty_grace_ms,
        } => {
            let launch = Launch {
                argv,
                env,
                cwd: cwd.map(std::path::PathBuf::from).unwrap_or_default(),
                user,
                cpus_milli: cpus_milli.unwrap_or(0),
                memory_mb: memory_mb.unwrap_or(0),
                image,
                registry_auth: registry_auth.map(Secret),
                tty_grace_ms,
                ..Launch::default()
            };
            Order::Start { key: replica.into(), launch: Box::new(launch), devices }
        }
        wire::Command::Signal { replica, signal } => {
            Order::Signal { key: replica.into(), signal: Signal::from_named_raw(signal)? }
        }
        wire::Command::Reconcile { replica, devices } => Order::Reconcile { key: replica.into(), devices },
        wire::Command::Kill { replica } => Order::Abandon { key: replica.into() },
        wire::Command::Attach { replica, session } => Order::Attach { key: replica.into(), session },
        wire::Command::Profile { replica, profile, seconds, native } => {
            Order::Profile { key: replica.into(), order: ProfileOrder { profile, seconds, native } }
        }
        wire::Command::Prefetch { image, registry_auth } => {
            Order::Prefetch { image, registry_auth: registry_auth.map(Secret) }
        }
        wire::Command::InjectFault { gpu, fault } => {
            Order::InjectFault { gpu, fault: fault.map(crate::protocol::fault_from_wire) }
        }
        wire::Command::CheckHealth { gpu, uuid } => Order::CheckHealth { gpu, uuid },
        wire::Command::MigLayout { gpu, layout } => Order::MigLayout {
            gpu,
            layout: layout.into_iter().map(|s| gpool_gpu::MigSlot { profile: s.profile, start: s.start }).collect(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_order_has_its_command_and_comes_back_from_it() {
        let key = ReplicaKey { job: 7, attempt: 2, rank: 1 };
        let launch = Launch {
            argv: vec!["python".into(), "train.py".into()],
            cwd: "/work".into(),
            user: Some("ana".into()),
            cpus_milli: 4_000,
            tty_grace_ms: Some(60_000),
            registry_auth: Some(Secret("{}".into())),
            ..Launch::default()
        };
        let order = Order::Start { key, launch: Box::new(launch), devices: vec!["GPU-1".into()] };
        assert_eq!(order_of(command_of(order.clone())), Some(order.clone()), "what travels comes back as it left");
        let wire::Command::Start { replica, argv, cwd, devices, user, cpus_milli, memory_mb, registry_auth, .. } =
            command_of(order)
        else {
            panic!("a start is a start");
        };
        assert_eq!((replica.job, replica.attempt, replica.rank), (7, 2, 1));
        assert_eq!((argv.len(), cwd.as_deref(), devices.len(), user.as_deref()), (2, Some("/work"), 1, Some("ana")));
        assert_eq!((cpus_milli, memory_mb, registry_auth.as_deref()), (Some(4_000), None, Some("{}")));
        assert!(matches!(command_of(Order::Abandon { key }), wire::Command::Kill { replica } if replica.job == 7));
        let signal = command_of(Order::Signal { key, signal: Signal::TERM });
        assert!(matches!(signal, wire::Command::Signal { signal: 15, .. }), "{signal:?}");
        for o in [
            Order::Signal { key, signal: Signal::KILL },
            Order::Reconcile { key, devices: vec!["GPU-2".into()] },
            Order::Abandon { key },
            Order::Attach { key, session: "5e551011".into() },
            Order::Prefetch { image: "img".into(), registry_auth: None },
            Order::CheckHealth { gpu: 3, uuid: "GPU-3".into() },
            Order::MigLayout { gpu: 1, layout: vec![gpool_gpu::MigSlot { profile: "1g.10gb".into(), start: 0 }] },
        ] {
            assert_eq!(order_of(command_of(o.clone())), Some(o));
        }
        // A signal number this node does not know is left alone, as before.
        assert_eq!(order_of(wire::Command::Signal { replica: key.into(), signal: 999 }), None);
    }
}
