//! What the controller and the service proxy (`plane/proxy`) tell each
//! other: the routing table the controller publishes, and the proxy's
//! reports (readiness, drains, load). The proxy imports these; the
//! controller never imports the proxy.

/// The proxy's latency buckets, in seconds.
pub const LATENCY_BOUNDS: [f64; 14] =
    [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// What the proxy routes; the controller publishes a new table with each change.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Routes {
    pub services: Vec<Route>,
}

/// One service's replicas as the proxy sees them.
#[derive(Clone, Debug, PartialEq)]
pub struct Route {
    pub name: String,
    /// The readiness probe's path.
    pub readiness: String,
    pub backends: Vec<Backend>,
}

/// A running replica: where to send requests, and whether it is draining.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backend {
    pub job: u64,
    /// `host:port`.
    pub addr: String,
    pub draining: bool,
}

/// What the proxy tells the controller.
#[derive(Debug, Clone, PartialEq)]
pub enum ProxyReport {
    /// The proxy listens at this URL.
    Bound { url: String },
    /// A replica's readiness probe began (or stopped) answering at `addr`.
    Ready { job: u64, addr: String, ready: bool },
    /// A draining replica has no request in flight any more.
    Drained { job: u64 },
    /// Each service's load over the last sampling period.
    Load(Vec<ServiceLoad>),
}

/// One service's load over one sampling period of the proxy.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServiceLoad {
    pub name: String,
    /// Requests in flight at the end of the period, held ones included.
    pub in_flight: f64,
    /// Requests answered in the period, and of them those the proxy failed (502/503/504).
    pub requests: u64,
    pub failed: u64,
    pub period_s: f64,
    /// Latency to the response's head over the last 10 s.
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    /// Latencies of the period per [`LATENCY_BOUNDS`] bucket (not cumulative; one more for +Inf), and their sum.
    pub latency_counts: Vec<u64>,
    pub latency_sum_s: f64,
}
