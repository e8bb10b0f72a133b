//! The call surface: every API call the controller answers, in one table
//! that says, once per call, what it carries, what it answers and who may
//! make it. The enum, the access check and the refusal of any call are
//! generated from that table; `requests.rs` says how each call is answered.

use std::path::PathBuf;
use std::time::Duration;

use gpool_api as api;
use tokio::sync::oneshot;

use crate::plane::auth::Role;
use crate::plane::metrics::Scrape;

/// An API failure: HTTP status and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
}

impl ApiError {
    pub fn new(status: u16, message: impl Into<String>) -> ApiError {
        ApiError { status, message: message.into() }
    }
}

/// Events per answer of `Call::Events` (a page of history).
pub const EVENTS_PAGE: usize = 1000;

/// Where a call's answer goes.
pub type Reply<T> = oneshot::Sender<Result<T, ApiError>>;

/// An answer ready to go, sent by the shell once the turn's writes are durable.
pub struct Answer(Box<dyn FnOnce() + Send>);

impl Answer {
    pub fn new<T: Send + 'static>(to: Reply<T>, value: Result<T, ApiError>) -> Answer {
        Answer(Box::new(move || {
            // The caller may have gone away (a closed connection): nothing to do.
            let _ = to.send(value);
        }))
    }

    /// An answer to a request that needs no token.
    pub(super) fn open<T: Send + 'static>(to: oneshot::Sender<T>, value: T) -> Answer {
        Answer(Box::new(move || {
            let _ = to.send(value);
        }))
    }

    pub fn send(self) {
        (self.0)()
    }
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Answer")
    }
}

/// Who may make a call (admins may make every call).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Any valid token.
    Anyone,
    /// User, reader and admin tokens: what reads the REST API.
    Read,
    /// User and admin tokens: what changes something through the REST API.
    People,
    /// Node and admin tokens: the agent protocol.
    Nodes,
}

impl Access {
    /// Whether a caller of this role may make a call of this access.
    pub fn check(self, role: Role) -> Result<(), ApiError> {
        match (self, role) {
            (_, Role::Admin) | (Access::Anyone, _) => Ok(()),
            (Access::Nodes, Role::Node) | (Access::People | Access::Read, Role::User) => Ok(()),
            (Access::Read, Role::Reader) => Ok(()),
            (Access::Nodes, _) => {
                Err(ApiError::new(403, "only node tokens (gpool token create --node) speak the agent protocol"))
            }
            (Access::People | Access::Read, Role::Node) => {
                Err(ApiError::new(403, "a node token only speaks the agent protocol"))
            }
            (Access::People, Role::Reader) => {
                Err(ApiError::new(403, "a read-only token (role reader) can read but not change anything"))
            }
        }
    }
}

/// Where a job's log is and whether more can come.
#[derive(Debug, Clone)]
pub struct LogTarget {
    pub path: PathBuf,
    pub finished: bool,
}

/// Filters of a job listing.
#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    pub states: Vec<api::JobState>,
    pub user: Option<String>,
    pub team: Option<String>,
    pub queue: Option<String>,
    /// Jobs that ended in [from, before), ms since the epoch (`gpool acct`).
    pub ended_from: Option<i64>,
    pub ended_before: Option<i64>,
    pub after: Option<u64>,
    pub limit: u32,
}

/// Generates [`Call`] with a `reply` field per variant, [`Call::access`] and
/// [`Call::refuse`] from the table below.
macro_rules! calls {
    ($( $(#[$doc:meta])* $name:ident { $($field:ident : $ty:ty),* } -> $out:ty, $access:ident; )*) => {
        /// An API call.
        #[derive(Debug)]
        pub enum Call {
            $( $(#[$doc])* $name { $($field: $ty,)* reply: Reply<$out> }, )*
        }

        impl Call {
            /// Who may make this call.
            pub fn access(&self) -> Access {
                match self { $( Call::$name { .. } => Access::$access, )* }
            }

            /// The answer that refuses this call with `err`.
            pub fn refuse(self, err: ApiError) -> Answer {
                match self { $( Call::$name { reply, .. } => Answer::new(reply, Err(err)), )* }
            }
        }
    };
}

calls! {
    /// Submit a batch of jobs: all are accepted, or none.
    /// Store a login to an image registry for the caller's jobs.
    RegistryLogin { registry: String, req: api::RegistryLogin } -> api::RegistryView, People;
    /// Forget the caller's login to a registry.
    RegistryLogout { registry: String } -> api::RegistryView, People;
    /// The caller's registry logins (never their passwords).
    Registries {} -> Vec<api::RegistryView>, People;
    /// Set GPUs aside for users or teams over a window; admins only (checked by the call).
    CreateReservation { req: api::reservation::ReservationRequest } -> api::reservation::ReservationView, People;
    /// The advance reservations.
    Reservations {} -> Vec<api::reservation::ReservationView>, Read;
    /// Delete a reservation; admins only (checked by the call).
    DeleteReservation { name: String } -> api::reservation::ReservationView, People;
    /// Create a service, or update it (a rolling update) if its spec changed.
    ApplyService { name: String, spec: Box<api::JobSpec> } -> api::ServiceApplied, People;
    /// Delete a service and stop its replicas.
    DeleteService { name: String } -> api::ServiceView, People;
    /// The services the caller may see.
    Services {} -> Vec<api::ServiceView>, Read;
    Submit { specs: Vec<api::JobSpec> } -> api::Submitted, People;
    /// Submit a pipeline run: every stage instance a job, all accepted or none (`pipelines.rs`).
    SubmitPipeline { spec: Box<api::pipeline::PipelineSpec> } -> api::pipeline::PipelineCreated, People;
    /// A run and its stages.
    Pipeline { run: u64 } -> api::pipeline::PipelineView, Read;
    /// The latest runs the caller may see, newest first.
    Pipelines { limit: u32 } -> api::pipeline::PipelineList, Read;
    /// Cancel every job of a run that has not ended.
    CancelPipeline { run: u64, from: String } -> api::pipeline::PipelineView, People;
    /// Power budgets and their use (`power.rs`).
    Power {} -> Vec<api::PowerView>, Read;
    /// Set a power budget live; admins only (checked by the call).
    SetPower { req: api::PowerSet, from: String } -> Vec<api::PowerView>, People;
    /// Create or change a recurring job or pipeline (`schedules.rs`).
    ApplySchedule { name: String, spec: Box<api::schedule::ScheduleSpec> } -> api::schedule::ScheduleView, People;
    /// The schedules the caller may see.
    Schedules {} -> Vec<api::schedule::ScheduleView>, Read;
    /// Delete a schedule (what it submitted goes on).
    DeleteSchedule { name: String } -> api::schedule::ScheduleView, People;
    Get { id: u64 } -> api::JobView, Read;
    List { query: ListQuery } -> api::JobList, Read;
    /// `from`: the caller's address, for the audit log.
    Cancel { id: u64, from: String } -> api::JobView, People;
    /// Hold a pending job back (`hold: true`) or release it (`holds.rs`).
    Hold { id: u64, hold: bool, from: String } -> api::JobView, People;
    Logs { id: u64, rank: u32, stream: String } -> LogTarget, Read;
    /// The nodes in the order they joined; `page`: (offset, limit) of them.
    Nodes { page: Option<(usize, usize)> } -> Vec<api::NodeView>, Read;
    /// What jobs that ran since then cost, grouped by job, user, team, queue or pool (`costs.rs`).
    Cost { by: String, since: Duration } -> api::CostReport, Read;
    /// Monthly budgets and this month's spend (`budgets.rs`).
    Budgets {} -> Vec<api::BudgetView>, Read;
    /// Elastic node pools (`elastic.rs`).
    Pools {} -> Vec<api::PoolView>, Read;
    Queues {} -> Vec<api::QueueView>, Read;
    Events { after: u64, job: Option<u64> } -> Vec<api::EventView>, Read;
    /// Admins only (checked by the call).
    CreateToken { req: api::TokenRequest, from: String } -> api::TokenCreated, People;
    /// Admins list every token; others their own.
    Tokens {} -> Vec<api::TokenView>, Read;
    /// Admins revoke any token; others their own.
    RevokeToken { id: String, from: String } -> api::TokenView, Read;
    WhoAmI {} -> api::WhoAmI, Anyone;
    /// A job's utilisation curve and usage.
    Usage { id: u64 } -> api::JobUsageView, Read;
    /// The advisor's findings for a job; `min_span` overrides how much telemetry it needs.
    Advice { id: u64, min_span: Option<Duration> } -> api::AdviceView, Read;
    Alerts {} -> Vec<api::AlertView>, Read;
    /// The dashboard's overview (`overview.rs`).
    Overview {} -> api::Overview, Read;
    /// Profile a running job for `seconds`; answered when the nodes have sent
    /// their captures. Its owner or admins only (checked by the call).
    Profile { id: u64, seconds: u32, native: bool } -> api::ProfileView, People;
    /// Open a session on an interactive job's terminal (`terminals.rs`): its owner or admins only.
    Attach { id: u64, session: String } -> api::terminal::AttachView, People;
    /// A job's latest profile, as the verdict (`view`) or as recorded (for its pictures).
    LatestProfile { id: u64 } -> Box<crate::plane::profile_doc::StoredProfile>, Read;
    /// The Prometheus scrape, when the control plane requires a token for it.
    Metrics {} -> Scrape, Read;
    /// A spot notice: the node is taken back within `within_ms`; admins or the node itself (checked by the call).
    Notice { node: String, within_ms: u64, from: String } -> api::NodeView, Anyone;
    /// Drain a node (`draining: true`) or let it take work again; admins only (checked by the call).
    Drain { node: String, draining: bool, from: String } -> api::NodeView, People;
    /// Show a fault on a simulated GPU; admins only, refused on real devices (`faults.rs`).
    InjectFault { node: String, gpu: u32, fault: gpool_gpu::InjectedFault, from: String } -> api::NodeView, People;
    /// Bring a quarantined GPU back into service; admins only (`faults.rs`).
    RestoreGpu { node: String, gpu: u32, from: String } -> api::NodeView, People;
    /// The GPUs out of service for faults (`gpool health`).
    Health {} -> Vec<api::QuarantineView>, Read;
    /// The agent protocol: a node joins or re-joins.
    Register { reg: api::agent::Register } -> api::agent::Registered, Nodes;
    /// The agent protocol: a long poll for commands.
    Poll { node: String, epoch: u64, after: u64 } -> api::agent::Commands, Nodes;
    /// The agent protocol: what happened on a node.
    Report { report: api::agent::Report } -> api::agent::Reported, Nodes;
    /// The agent protocol: may `node` ship output of `job`'s replica `rank`? (`nodes.rs`)
    ShipLog { node: Option<String>, job: u64, rank: u32 } -> (), Nodes;
}

impl Call {
    /// Whether the call only reads state (a view): such calls are answered
    /// before the turn that handles the rest of their batch
    /// (`Controller::answer_views`). Their handlers change nothing but a
    /// token's last use.
    pub fn only_reads(&self) -> bool {
        matches!(
            self,
            Call::Get { .. }
                | Call::List { .. }
                | Call::Nodes { .. }
                | Call::Cost { .. }
                | Call::Budgets { .. }
                | Call::Pools { .. }
                | Call::Queues { .. }
                | Call::Events { .. }
                | Call::Tokens { .. }
                | Call::WhoAmI { .. }
                | Call::Usage { .. }
                | Call::Advice { .. }
                | Call::Alerts { .. }
                | Call::Overview { .. }
                | Call::Health { .. }
                | Call::Services { .. }
                | Call::Pipeline { .. }
                | Call::Pipelines { .. }
                | Call::Power { .. }
                | Call::Schedules { .. }
                | Call::Registries { .. }
                | Call::Reservations { .. }
                | Call::Logs { .. }
        )
    }
}

/// A request that needs no token (the Prometheus scrape).
#[derive(Debug)]
pub enum Open {
    Metrics { reply: oneshot::Sender<Scrape> },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_says_who_may_call() {
        let (tx, _rx) = oneshot::channel();
        let whoami = Call::WhoAmI { reply: tx };
        let (tx, _rx) = oneshot::channel();
        let poll = Call::Poll { node: "n".into(), epoch: 1, after: 0, reply: tx };
        let (tx, _rx) = oneshot::channel();
        let get = Call::Get { id: 1, reply: tx };
        let (tx, _rx) = oneshot::channel();
        let cancel = Call::Cancel { id: 1, from: "test".into(), reply: tx };
        let cases = [
            (&whoami, Role::Node, true),
            (&whoami, Role::User, true),
            (&poll, Role::Node, true),
            (&poll, Role::Admin, true),
            (&poll, Role::User, false),
            (&get, Role::User, true),
            (&get, Role::Admin, true),
            (&get, Role::Node, false),
            (&get, Role::Reader, true),
            (&cancel, Role::Reader, false),
            (&cancel, Role::User, true),
        ];
        for (call, role, allowed) in cases {
            assert_eq!(call.access().check(role).is_ok(), allowed, "{call:?} by {role:?}");
        }
    }

    #[test]
    fn a_refusal_reaches_the_caller() {
        let (tx, mut rx) = oneshot::channel();
        Call::Get { id: 7, reply: tx }.refuse(ApiError::new(401, "no")).send();
        assert_eq!(rx.try_recv().expect("answered"), Err(ApiError::new(401, "no")));
    }
}
