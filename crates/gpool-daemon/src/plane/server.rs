//! A control plane's wiring: its settings, the controller's configuration
//! read from them, and the thread and HTTP server that run it.

use std::io::Write as _;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use gpool_core::Policy;

use std::sync::mpsc::{Receiver, Sender};

use crate::plane::controller::{
    Budget, BudgetMode, BudgetScope, Config, Controller, ElasticConfig, Event, LocalNode, ProviderPrograms, Shell,
    StoreFailed, Turn, free_local_port,
};
use crate::plane::http::{AppState, LocalUsers, router};
use crate::plane::identity::Identities;
use crate::plane::listen::{self, Limits};
pub use crate::plane::process::{Away, Process, away_message};
use crate::plane::telemetry::TelemetryConfig;
use crate::plane::webhook::Webhook;
use crate::wiring::{SOCKET_FILE, TOKEN_FILE, URL_FILE, raise_open_file_limit, read_alert_rules, read_queues};
use gpool_core::pricing::Prices;

/// Settings of a control plane (`gpool up`, `gpool serve`).
#[derive(Clone, Debug)]
pub struct PlaneConfig {
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    pub policy: String,
    /// Over the policy's own placement strategy.
    pub placement: Option<gpool_core::PlacementStrategy>,
    /// Knobs of the policy, `KEY=VALUE` (`--policy-set`, as `gpool sim --set`).
    pub policy_knobs: Vec<String>,
    pub queues_file: Option<PathBuf>,
    /// fsync every commit (survive power loss, not only process crashes).
    pub fsync: bool,
    /// Alert rules (YAML); default: the built-in rules.
    pub alert_rules: Option<PathBuf>,
    /// Where to POST alert notifications.
    pub alert_webhook: Option<String>,
    /// `MODEL=USD` per GPU-hour, over the built-in prices.
    pub gpu_prices: Vec<String>,
    /// A remote node silent for this long is down.
    pub lease: std::time::Duration,
    /// A GPU quarantined for a fault is first checked this long after, then this often while it fails.
    pub health_check_after: std::time::Duration,
    pub health_check_every: std::time::Duration,
    /// An API connection that does not send a whole request head within this time is closed.
    pub http_header_timeout: std::time::Duration,
    /// Bytes kept beside a SQLite state database for when its disk fills (0: none).
    pub state_reserve: u64,
    /// `/metrics` requires a reader's, user's or admin's token.
    pub metrics_auth: bool,
    /// HTTPS with a certificate of the CA in this directory (`tls.rs`); `None`: plain HTTP.
    pub tls_dir: Option<PathBuf>,
    /// More names (or addresses) the server certificate holds.
    pub tls_sans: Vec<String>,
    /// The server's certificate chain and key from files (a site's own PKI), instead of gpool's CA.
    pub tls_files: Option<(PathBuf, PathBuf)>,
    /// Plain HTTP on an address other than loopback (tokens then cross the network in the clear).
    pub insecure_http: bool,
    /// The Unix socket for local callers; `None`: `DATA_DIR/gpool.sock`.
    pub socket: Option<PathBuf>,
    /// The identity file (`identity.rs`).
    pub identities: Option<PathBuf>,
    /// Elastic node pools (`pools_file.rs`, docs/cost.md).
    pub pools: Option<PathBuf>,
    /// Monthly budgets per team or queue (docs/cost.md).
    pub budgets: Option<PathBuf>,
    /// Where the inference services' proxy listens (`plane/proxy`); `None`: no proxy, no services.
    pub proxy_listen: Option<SocketAddr>,
}

/// The controller's settings from a control plane's.
pub fn controller_config(p: &PlaneConfig) -> anyhow::Result<Config> {
    let mut policy = Policy::by_name(&p.policy)?;
    for knob in &p.policy_knobs {
        policy.set(knob).map_err(|e| anyhow::anyhow!("--policy-set {e}"))?;
    }
    if let Some(placement) = p.placement {
        policy.placement = placement;
    }
    let queues = match &p.queues_file {
        Some(f) => read_queues(f)?,
        None => Vec::new(),
    };
    let rules = match &p.alert_rules {
        Some(f) => read_alert_rules(f)?,
        None => gpool_core::alert::Rule::defaults(),
    };
    let prices = Prices::built_in().with_overrides(&p.gpu_prices).map_err(anyhow::Error::msg)?;
    let elastic = match &p.pools {
        Some(f) => Some(elastic_config(p, f, &prices)?),
        None => None,
    };
    if p.lease < std::time::Duration::from_millis(500) {
        bail!("--lease must be at least 500ms, got {:?}", p.lease);
    }
    Ok(Config {
        data_dir: p.data_dir.clone(),
        policy,
        queues,
        power_budgets: Vec::new(),
        retry_backoff: std::time::Duration::from_secs(10),
        health_checks: gpool_core::fault::CheckTiming { after: p.health_check_after, every: p.health_check_every },
        telemetry: TelemetryConfig { rules, ..TelemetryConfig::default() },
        prices,
        lease: p.lease,
        master_ports: 29_500..30_500,
        local_port: free_local_port,
        single_user: None,
        daemon_account: crate::wiring::this_account(),
        identities: match &p.identities {
            Some(f) => Identities::read(f)?,
            None => Identities::default(),
        },
        elastic,
        budgets: match &p.budgets {
            Some(f) => read_budgets(f)?,
            None => Vec::new(),
        },
    })
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct BudgetFile {
    team: Option<String>,
    queue: Option<String>,
    dollars_per_month: f64,
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    alert_at: Option<Vec<u32>>,
}

/// Reads a budgets file: a list of `{team | queue, dollarsPerMonth, mode: hard|soft, alertAt: [50, 80, 100]}`.
pub fn read_budgets(path: &Path) -> anyhow::Result<Vec<Budget>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let list: Vec<BudgetFile> = gpool_api::yaml::from_str(&text).with_context(|| {
        format!("{}: expected a list of {{team or queue, dollarsPerMonth, mode, alertAt}}", path.display())
    })?;
    list.into_iter()
        .enumerate()
        .map(|(i, b)| {
            let at = |what: String| anyhow::anyhow!("{}: budget {}: {what}", path.display(), i + 1);
            let scope = match (b.team, b.queue) {
                (Some(t), None) => BudgetScope::Team(t),
                (None, Some(q)) => BudgetScope::Queue(q),
                _ => return Err(at("give either team or queue".into())),
            };
            if !(b.dollars_per_month.is_finite() && b.dollars_per_month > 0.0) {
                return Err(at(format!("dollarsPerMonth must be a positive number, got {}", b.dollars_per_month)));
            }
            let mode = match b.mode.as_deref() {
                None | Some("hard") => BudgetMode::Hard,
                Some("soft") => BudgetMode::Soft,
                Some(m) => return Err(at(format!("mode {m:?} is not hard or soft"))),
            };
            let mut alert_at = b.alert_at.unwrap_or_else(|| vec![50, 80, 100]);
            alert_at.sort_unstable();
            alert_at.dedup();
            Ok(Budget { scope, dollars_per_month: b.dollars_per_month, mode, alert_at })
        })
        .collect()
}

/// The pools file as the controller takes it: every pool with a provider,
/// the `local` provider as `gpool local-node create|delete` (this binary).
fn elastic_config(p: &PlaneConfig, file: &Path, prices: &Prices) -> anyhow::Result<ElasticConfig> {
    use crate::pools_file::Provider;
    let spec = crate::pools_file::read_pools(file, prices)?;
    let mut providers = Vec::new();
    for (pool, provider) in spec.pools.iter().zip(&spec.providers) {
        providers.push(match provider {
            Some(Provider::Command { create, delete, timeout }) => {
                ProviderPrograms { create: create.clone(), delete: delete.clone(), timeout: *timeout }
            }
            Some(Provider::Local) => {
                let exe = std::env::current_exe()
                    .context("the local provider runs this gpool binary, whose path is unknown")?
                    .display()
                    .to_string();
                let words = |op: &str| vec![exe.clone(), "local-node".into(), op.into()];
                ProviderPrograms { create: words("create"), delete: words("delete"), timeout: Duration::from_secs(60) }
            }
            None => bail!(
                "{}: pool {} has no provider: add `provider: {{local: {{}}}}` or `provider: {{command: {{create: [...], delete: [...]}}}}`",
                file.display(),
                pool.name()
            ),
        });
    }
    let tls = p.tls_dir.is_some() || p.tls_files.is_some();
    let host = if p.listen.ip().is_unspecified() {
        crate::wiring::host_name().unwrap_or_else(|| "127.0.0.1".into())
    } else {
        p.listen.ip().to_string()
    };
    Ok(ElasticConfig {
        pools: spec.pools,
        providers,
        max_dollars_per_hour: spec.max_dollars_per_hour,
        server_url: format!("{}://{host}:{}", if tls { "https" } else { "http" }, p.listen.port()),
    })
}

/// A controller ready to run: what `Controller::new` returned, the agent in
/// this process if any, and the channel its events come on.
pub struct Ready {
    pub controller: Controller,
    pub first: Turn,
    pub local: Option<Box<dyn LocalNode>>,
    pub tx: Sender<Event>,
    pub rx: Receiver<Event>,
    /// Interactive sessions' relay, shared with the local node (`gpool up`).
    pub terminals: std::sync::Arc<crate::plane::terminals::Relay>,
}

/// How serving ended.
pub enum Ended {
    /// SIGINT or SIGTERM.
    Stopped,
    /// The store refused a write: the controller stopped, and so did the API.
    StoreFailed(StoreFailed),
    /// The store refused a write, the API answered reads from memory while
    /// [`Reconnect`] ran, and it gave a store this process leads again.
    Relead(StoreFailed, Box<dyn gpool_store::Store>),
}

/// After a failed write: reconnects to the database (with back-off, until a
/// stop signal) and tries to lead; `Some(store)` when this process leads
/// again, `None` when another does or it stopped (`gpool serve`).
pub type Reconnect = Box<dyn FnOnce() -> anyhow::Result<Option<Box<dyn gpool_store::Store>>> + Send>;

/// What a control plane whose database is away answers, and how to get it back.
pub struct WhileAway {
    /// The database, for messages (its URL without the password).
    pub store: String,
    pub reconnect: Reconnect,
}

/// Runs the controller thread and the HTTP API until a stop signal, or until
/// the controller stops because the store refused a write; `banner` is
/// printed once listening (its first line names the URL).
/// With `away` (`gpool serve`), a failed write does not close the API: it
/// answers reads from memory, refuses the rest with 503 naming the database
/// (every answer marked `X-Gpool-Store-Away`), and agents find no leader,
/// while `away.reconnect` runs.
pub fn serve(
    process: &Process,
    plane: &PlaneConfig,
    ready: Ready,
    banner: impl FnOnce(&str) -> String + Send + 'static,
    away: Option<WhileAway>,
) -> anyhow::Result<Ended> {
    let Ready { mut controller, first, local, tx, rx, terminals } = ready;
    let single_user = controller.single_user().is_some();
    let token = admin_token(&plane.data_dir)?;
    // The admin is this daemon's own account: where jobs run as their
    // submitters' accounts, the admin's run as it.
    let admin_user = crate::wiring::this_account().unwrap_or_else(|| "admin".into());
    controller.ensure_admin_token(&token, &admin_user)?;
    let webhook = match &plane.alert_webhook {
        Some(url) => Some(Webhook::spawn(url.clone(), format!("http://{}", plane.listen))?),
        None => None,
    };
    let (events, _) = tokio::sync::broadcast::channel(4096);
    let bound_url = crate::plane::provision::BoundUrl::default();
    let provision: Option<Box<dyn crate::plane::controller::Provision>> =
        Some(Box::new(crate::plane::provision::Provisioner::new(tx.clone(), &plane.data_dir, bound_url.clone())));
    let (routes_tx, routes_rx) =
        tokio::sync::watch::channel(std::sync::Arc::new(crate::plane::controller::Routes::default()));
    let shell = Shell {
        local,
        events: events.clone(),
        webhook,
        renew_every: Some(Duration::from_secs(1)),
        provision,
        routes: plane.proxy_listen.map(|_| routes_tx),
    };
    let (ended_tx, ended_rx) = tokio::sync::oneshot::channel::<Result<(), StoreFailed>>();
    let (store_name, reconnect) = match away {
        Some(WhileAway { store, reconnect }) => (Some(store), Some(reconnect)),
        None => (None, None),
    };
    let marked: Away = Away::default();
    let ctl = {
        let marked = marked.clone();
        std::thread::Builder::new().name("controller".into()).spawn(move || {
            let (mut shell, mut controller) = (shell, controller);
            let ran = shell.run(&mut controller, first, &rx);
            let why = match (&ran, store_name) {
                (Err(failed), Some(store)) => Some(away_message(&store, &failed.to_string())),
                _ => None,
            };
            *marked.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = why.clone();
            let _ = ended_tx.send(ran);
            if let Some(why) = why {
                shell.answer_reads(&mut controller, &rx, &why);
            }
        })?
    };
    let tls = server_tls(plane)?;
    let state = AppState {
        tx: tx.clone(),
        events,
        data_dir: plane.data_dir.clone(),
        metrics_auth: plane.metrics_auth,
        ca_pem: tls.as_ref().map(|t| t.ca_pem.clone()),
        local_users: std::sync::Arc::new(LocalUsers::default()),
        log_watch: Default::default(),
        away: marked,
        terminals,
    };
    let socket = plane.socket.clone().unwrap_or_else(|| plane.data_dir.join(SOCKET_FILE));
    let local = bind_socket(&socket, single_user)?;
    let socket_note = format!(
        "local users: gpool CLI over {}{}",
        socket.display(),
        if single_user { " (this account and root only: single-user mode)" } else { ", no token needed" }
    );
    let scheme = if tls.is_some() { "https" } else { "http" };
    let tls_note = tls.as_ref().map(|t| {
        format!(
            "TLS: CA {} ({}); agents: --ca-fingerprint {}",
            match (&plane.tls_files, &plane.tls_dir) {
                (Some((cert, _)), _) => format!("the last certificate of {}", cert.display()),
                (None, Some(d)) => d.join("ca.pem").display().to_string(),
                (None, None) => String::new(),
            },
            t.fingerprint,
            t.fingerprint
        )
    });
    let tls_config = tls.map(|t| t.config);
    let data_dir = plane.data_dir.clone();
    let listen = plane.listen;
    let header_timeout = plane.http_header_timeout;
    let mut stop = process.stop.clone();
    let proxy = match plane.proxy_listen {
        Some(addr) => {
            let l = std::net::TcpListener::bind(addr).with_context(|| {
                format!("--proxy-listen {addr}: cannot listen there (pick another address or port)")
            })?;
            l.set_nonblocking(true)?;
            Some(l)
        }
        None => None,
    };
    let proxy_tx = tx.clone();
    let mut proxy_stop = process.stop.clone();
    let held = process.held()?;
    let served: anyhow::Result<Ended> = process.rt.block_on(async move {
        let listener = match held {
            Some(l) => tokio::net::TcpListener::from_std(l).context("the held socket")?,
            None => {
                tokio::net::TcpListener::bind(listen).await.with_context(|| format!("cannot listen on {listen}"))?
            }
        };
        let addr = listener.local_addr()?;
        let url = format!("{scheme}://{addr}");
        bound_url.set(&url);
        std::fs::write(data_dir.join(URL_FILE), format!("{url}\n"))?;
        println!("{}", banner(&url));
        println!("admin token in {}", data_dir.join(TOKEN_FILE).display());
        println!("{socket_note}");
        if let Some(note) = &tls_note {
            println!("{note}");
        }
        let _ = std::io::stdout().flush();
        let limits = Limits::for_open_files(raise_open_file_limit(), header_timeout);
        // The socket is bound and is served from here on: systemd may start what waits for the API.
        crate::notify::ready(&format!("serving {url}"));
        let stopping = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        let local = tokio::net::UnixListener::from_std(local).context("the Unix socket")?;
        if let Some(l) = proxy {
            let l = tokio::net::TcpListener::from_std(l).context("the proxy's socket")?;
            println!("services: proxy on http://{}", l.local_addr()?);
            let stopping = async move {
                let _ = proxy_stop.wait_for(|s| *s).await;
            };
            tokio::spawn(crate::plane::proxy::serve(l, routes_rx, proxy_tx, limits.for_proxy(), stopping));
        }
        let server = listen::serve(listener, Some(local), router(state), limits, tls_config, stopping);
        tokio::pin!(server);
        let failed = tokio::select! {
            () = &mut server => return Ok(Ended::Stopped),
            Ok(Err(failed)) = ended_rx => failed,
        };
        let Some(reconnect) = reconnect else {
            // The controller stopped by itself: its store failed. Nothing more
            // can be answered; stop at once rather than wait for open streams.
            return Ok(Ended::StoreFailed(failed));
        };
        tracing::warn!("{failed}; answering reads from memory while the database is away");
        let again = tokio::task::spawn_blocking(reconnect);
        tokio::select! {
            () = &mut server => Ok(Ended::Stopped),
            got = again => Ok(match got {
                Ok(Ok(Some(store))) => Ended::Relead(failed, store),
                Ok(Err(e)) => {
                    tracing::warn!("reconnecting: {e:#}");
                    Ended::StoreFailed(failed)
                }
                _ => Ended::StoreFailed(failed),
            }),
        }
    });
    let _ = tx.send(Event::Shutdown);
    let _ = ctl.join();
    let _ = std::fs::remove_file(plane.data_dir.join(URL_FILE));
    let _ = std::fs::remove_file(&socket);
    served
}

/// The API's TLS, as the flags say: given files, else the CA of its own in
/// `--tls-dir` (made on first start), else none (refused beyond loopback
/// without --insecure-http). A standby answers with it too (`serve.rs`).
pub(crate) fn server_tls(plane: &PlaneConfig) -> anyhow::Result<Option<crate::plane::tls::ServerTls>> {
    Ok(match (&plane.tls_files, &plane.tls_dir) {
        (Some((cert, key)), _) => Some(crate::plane::tls::from_files(cert, key)?),
        (None, Some(dir)) => {
            let mut names = plane.tls_sans.clone();
            if !plane.listen.ip().is_unspecified() {
                names.push(plane.listen.ip().to_string());
            }
            Some(crate::plane::tls::load_or_create(dir, &names)?)
        }
        (None, None) if !plane.listen.ip().is_loopback() && !plane.insecure_http => bail!(
            "--listen {}: plain HTTP beyond loopback would send every token in the clear; pass --tls \
             (a CA of gpool's own, made on first start) or --insecure-http",
            plane.listen
        ),
        (None, None) => None,
    })
}

/// Binds the Unix socket local callers use: a stale one (a daemon that
/// crashed) is replaced, a live one is another daemon's. Anyone on the
/// machine may connect (the kernel names them, `identity.rs` decides what
/// they may do), except in single-user mode: then only this account
/// (and root). Its directory must let them through: a root daemon's data
/// directory is made passable (0711), not listable.
fn bind_socket(path: &Path, single_user: bool) -> anyhow::Result<std::os::unix::net::UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        bail!(
            "another gpool daemon serves {}: stop it first, or pass another --socket (or --data-dir)",
            path.display()
        );
    }
    let _ = std::fs::remove_file(path);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        if !single_user && rustix::process::geteuid().is_root() {
            let mode = std::fs::metadata(dir).map(|m| m.permissions().mode()).unwrap_or(0o700);
            let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode | 0o711));
        }
    }
    let listener = std::os::unix::net::UnixListener::bind(path).with_context(|| {
        format!("cannot listen on the Unix socket {} (at most 107 bytes; pass a shorter --socket)", path.display())
    })?;
    listener.set_nonblocking(true)?;
    let mode = if single_user { 0o600 } else { 0o666 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("chmod {mode:o} {}", path.display()))?;
    Ok(listener)
}

/// Reads or creates the admin token file (mode 0600).
fn admin_token(dir: &Path) -> anyhow::Result<String> {
    let path = dir.join(TOKEN_FILE);
    if let Ok(t) = std::fs::read_to_string(&path)
        && !t.trim().is_empty()
    {
        return Ok(t.trim().to_string());
    }
    let secret = crate::plane::auth::new_secret().map_err(anyhow::Error::msg)?;
    let mut f = std::fs::OpenOptions::new().create(true).write(true).truncate(true).mode(0o600).open(&path)?;
    writeln!(f, "{secret}")?;
    Ok(secret)
}
