//! A throwaway PostgreSQL server on loopback, for tests and benchmarks only.
//!
//! A crate of its own (issue 37) so that the `gpool` binary does not carry it:
//! `gpool-store`'s and `gpool-cli`'s tests take it as a dev-dependency, and
//! `gpool-devtools` (the chaos suite) as a dependency. It depends on no gpool
//! crate, so a dev-dependency on it makes no second copy of one.
//!
//! [`TestPostgres::start`] runs `initdb` into a new directory (in `/dev/shm`
//! when it has 1 GiB free, else in the temporary directory) and starts
//! `postgres` on `127.0.0.1` on a free port, with `trust` authentication for
//! the `postgres` superuser and `fsync=off` (unless started `durable`):
//! anyone on the machine can connect to it, and it loses data when the
//! machine crashes. It can be stopped and started again on the same port
//! with its data, as an administrator restarts a server. Never use it
//! for anything but tests. Dropping it stops the server and removes the
//! directory; so does a watchdog process when the process that started the
//! server exits without dropping it (a `static` server is never dropped, and
//! a test process may be killed).
//!
//! What it cannot do:
//! - run without the PostgreSQL server binaries: it looks for `initdb` and
//!   `postgres` on `PATH`, then under `/usr/lib/postgresql/*/bin` (Debian's
//!   layout, newest version first); without them it fails with
//!   [`TestPostgresError::NotInstalled`] (`apt-get install -y postgresql`).
//! - run PostgreSQL as root, which PostgreSQL refuses: when the effective
//!   user is root, `initdb` and the server run as the `postgres` system user
//!   (which the Debian package creates), in a directory owned by that user
//!   under `/dev/shm` or `/tmp` (not `$TMPDIR`, which it may not reach).
//! - be fast on a disk: creating a database takes about 300 ms there, 20 ms
//!   in `/dev/shm`; starting a server takes about 1 s either way (`initdb`).
//! - run on anything but Unix: it uses Unix users, `id`, `kill` and `sh`.
//! - clean up after a `SIGKILL` of the whole process group, which kills the
//!   server and the watchdog with the test process: the directory stays.

use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// How long the server may take to accept connections.
const START_DEADLINE: Duration = Duration::from_secs(30);
/// How long the server may take to stop after `SIGINT` before `SIGKILL`.
const STOP_DEADLINE: Duration = Duration::from_secs(5);
/// Attempts at a free port (another process may take the one picked).
const PORT_ATTEMPTS: u32 = 3;

/// Why a test server could not be started or used.
#[derive(Debug, thiserror::Error)]
pub enum TestPostgresError {
    #[error(
        "PostgreSQL server binaries (initdb, postgres) not found on PATH or under /usr/lib/postgresql/*/bin; \
         install them with `apt-get install -y postgresql`"
    )]
    NotInstalled,
    #[error(
        "running as root, which PostgreSQL refuses, and there is no `postgres` system user to run it as \
         (`apt-get install -y postgresql` creates one): {0}"
    )]
    NoPostgresUser(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("initdb failed: {0}")]
    Initdb(String),
    #[error("the PostgreSQL server did not start: {0}")]
    Start(String),
    #[error("PostgreSQL error: {0}")]
    Postgres(String),
    #[error("invalid database name {0:?} (expected 1 to 63 of a-z, 0-9, _, not starting with a digit)")]
    BadName(String),
}

/// A driver error as text: the server's message, else the error and its causes.
fn describe(e: &postgres::Error) -> String {
    let chain = || std::iter::successors(Some(e as &dyn std::error::Error), |e| e.source());
    e.as_db_error().map_or_else(|| chain().map(|e| e.to_string()).collect::<Vec<_>>().join(": "), |db| db.to_string())
}

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> TestPostgresError {
    let what = what.into();
    move |source| TestPostgresError::Io { what, source }
}

/// A PostgreSQL server of its own on `127.0.0.1`, for tests and benchmarks.
///
/// Every database on it is reachable as the `postgres` superuser without a
/// password. It is `Sync`: share one per test binary (in a `static`
/// `OnceLock`) and give each test its own [`fresh_database`](Self::fresh_database).
pub struct TestPostgres {
    /// `None` between [`stop`](Self::stop) and [`start_again`](Self::start_again).
    server: Option<Child>,
    bin: PathBuf,
    run_as: Option<(u32, u32)>,
    options: TestPostgresOptions,
    /// Closing its stdin (our exit) makes it stop the server and remove `dir`.
    watchdog: Child,
    watchdog_stdin: Option<ChildStdin>,
    dir: PathBuf,
    port: u16,
}

/// How a [`TestPostgres`] runs, beyond its defaults.
#[derive(Clone, Debug, Default)]
pub struct TestPostgresOptions {
    /// `fsync` and `synchronous_commit` on, as in production: a commit waits
    /// for its write-ahead log to reach the disk (by default both are off,
    /// which is faster and loses the last commits in a crash of the server).
    pub durable: bool,
    /// Extra environment of the server process (a test may preload a library).
    pub env: Vec<(String, String)>,
    /// TLS on (`ssl=on`) with a certificate for `localhost` and `127.0.0.1`
    /// from a CA of its own, whose certificate is [`TestPostgres::ca_file`].
    pub tls: bool,
}

impl TestPostgres {
    /// Initialises a cluster in a new temporary directory and starts a server
    /// on a free port, returning once it accepts connections (within 30 s).
    pub fn start() -> Result<TestPostgres, TestPostgresError> {
        TestPostgres::start_with(TestPostgresOptions::default())
    }

    /// [`start`](Self::start) with `options`.
    pub fn start_with(options: TestPostgresOptions) -> Result<TestPostgres, TestPostgresError> {
        let bin = find_binaries()?;
        let run_as = if effective_uid()? == 0 { Some(postgres_user()?) } else { None };
        let dir = make_dir(run_as)?;
        // From here on, failures must remove the directory.
        match start_in(&bin, run_as, &dir, &options) {
            Ok((server, port)) => match spawn_watchdog(server.id(), &dir) {
                Ok((watchdog, stdin)) => Ok(TestPostgres {
                    server: Some(server),
                    bin,
                    run_as,
                    options,
                    watchdog,
                    watchdog_stdin: Some(stdin),
                    dir,
                    port,
                }),
                Err(e) => {
                    stop_server(server);
                    let _ = fs::remove_dir_all(&dir);
                    Err(e)
                }
            },
            Err(e) => {
                let _ = fs::remove_dir_all(&dir);
                Err(e)
            }
        }
    }

    /// Stops the server as an administrator would (`pg_ctl stop -m fast`:
    /// it ends every session, checkpoints and exits), keeping its data.
    /// Nothing happens if it is already stopped.
    pub fn stop(&mut self) {
        if let Some(server) = self.server.take() {
            fast_shutdown(server);
        }
    }

    /// Starts a stopped server again on the same port with the same data,
    /// returning once it accepts connections (within 30 s).
    pub fn start_again(&mut self) -> Result<(), TestPostgresError> {
        if self.server.is_some() {
            return Ok(());
        }
        let server = launch(&self.bin, self.run_as, &self.dir, self.port, &self.options)?;
        let server = wait_ready(server, self.port, &self.dir.join("server.log"))?
            .map_err(|why| TestPostgresError::Start(format!("on port {} again: {why}", self.port)))?;
        // The watchdog watches a process id: a new server needs a new watchdog.
        let _ = self.watchdog.kill();
        let _ = self.watchdog.wait();
        let (watchdog, stdin) = spawn_watchdog(server.id(), &self.dir)?;
        self.watchdog = watchdog;
        self.watchdog_stdin = Some(stdin);
        self.server = Some(server);
        Ok(())
    }

    /// The CA certificate the server's is signed by, when started with `tls`:
    /// `sslmode=require&sslrootcert=` this.
    pub fn ca_file(&self) -> Option<PathBuf> {
        Some(self.dir.join("ca.pem")).filter(|p| self.options.tls && p.exists())
    }

    /// The TCP port the server listens on (on `127.0.0.1`).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of the `postgres` database, as the `postgres` superuser.
    pub fn url(&self) -> String {
        self.database_url("postgres")
    }

    /// Creates the database `name` (which must not exist yet: it fails
    /// otherwise) and returns its URL. Names are restricted to lowercase
    /// letters, digits and `_` so that they need no quoting.
    pub fn fresh_database(&self, name: &str) -> Result<String, TestPostgresError> {
        let valid = !name.is_empty()
            && name.len() <= 63
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !valid {
            return Err(TestPostgresError::BadName(name.into()));
        }
        let pg = |e: postgres::Error| TestPostgresError::Postgres(describe(&e));
        let mut admin = postgres::Client::connect(&self.url(), postgres::NoTls).map_err(pg)?;
        admin.batch_execute(&format!("CREATE DATABASE {name}")).map_err(pg)?;
        Ok(self.database_url(name))
    }

    fn database_url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }
}

impl Drop for TestPostgres {
    /// Stops the server ([`fast_shutdown`]) and removes the directory.
    fn drop(&mut self) {
        // The watchdog must not race us to the server and the directory.
        let _ = self.watchdog.kill();
        drop(self.watchdog_stdin.take());
        let _ = self.watchdog.wait();
        self.stop();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The directory holding `initdb` and `postgres`.
fn find_binaries() -> Result<PathBuf, TestPostgresError> {
    let has_both = |d: &Path| d.join("initdb").is_file() && d.join("postgres").is_file();
    if let Some(path) = std::env::var_os("PATH")
        && let Some(d) = std::env::split_paths(&path).find(|d| has_both(d))
    {
        return Ok(d);
    }
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            has_both(&bin).then_some((v, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, d)| d).ok_or(TestPostgresError::NotInstalled)
}

fn id(args: &[&str]) -> Result<u32, String> {
    let out = Command::new("id").args(args).output().map_err(|e| format!("cannot run `id`: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!("`id {}` failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()));
    }
    text.trim().parse().map_err(|_| format!("`id {}` printed {:?}", args.join(" "), text.trim()))
}

fn effective_uid() -> Result<u32, TestPostgresError> {
    id(&["-u"]).map_err(TestPostgresError::Start)
}

/// The uid and gid of the `postgres` system user.
fn postgres_user() -> Result<(u32, u32), TestPostgresError> {
    let uid = id(&["-u", "postgres"]).map_err(TestPostgresError::NoPostgresUser)?;
    let gid = id(&["-g", "postgres"]).map_err(TestPostgresError::NoPostgresUser)?;
    Ok((uid, gid))
}

/// `/dev/shm` when it is a RAM disk with room for a few clusters (1 GiB
/// free; a container's default 64 MiB is not): there `CREATE DATABASE`
/// takes 20 ms instead of 300 ms on a disk.
fn ram_dir() -> Option<PathBuf> {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        return None;
    }
    let out = Command::new("df").args(["-Pk"]).arg(shm).stderr(Stdio::null()).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let free_kib: u64 = text.lines().nth(1)?.split_whitespace().nth(3)?.parse().ok()?;
    (out.status.success() && free_kib >= 1 << 20).then(|| shm.to_path_buf())
}

/// A new private directory: under `/dev/shm` (see [`ram_dir`]), else under
/// `/tmp` as root (so that the `postgres` user can reach it) and the
/// temporary directory otherwise.
fn make_dir(run_as: Option<(u32, u32)>) -> Result<PathBuf, TestPostgresError> {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let base = ram_dir().unwrap_or_else(|| if run_as.is_some() { PathBuf::from("/tmp") } else { std::env::temp_dir() });
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let dir = base.join(format!("gpool-pg-{}-{}-{nanos:x}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed)));
    fs::create_dir(&dir).map_err(io_err(format!("cannot create {}", dir.display())))?;
    let setup = || -> std::io::Result<()> {
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))?;
        if let Some((uid, gid)) = run_as {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))?;
        }
        Ok(())
    };
    if let Err(e) = setup() {
        let _ = fs::remove_dir_all(&dir);
        return Err(io_err(format!("cannot prepare {}", dir.display()))(e));
    }
    Ok(dir)
}

/// A command that runs as `run_as` (uid, gid) when given, from `dir` (the
/// `postgres` user may not be able to read our working directory).
fn command(program: PathBuf, run_as: Option<(u32, u32)>, dir: &Path) -> Command {
    let mut c = Command::new(program);
    c.current_dir(dir);
    if let Some((uid, gid)) = run_as {
        c.uid(uid).gid(gid);
    }
    c
}

/// Runs initdb and starts the server; returns it once it accepts connections.
fn start_in(
    bin: &Path,
    run_as: Option<(u32, u32)>,
    dir: &Path,
    options: &TestPostgresOptions,
) -> Result<(Child, u16), TestPostgresError> {
    let data = dir.join("data");
    let out = command(bin.join("initdb"), run_as, dir)
        .arg("-D")
        .arg(&data)
        .args(["--auth=trust", "-U", "postgres", "-E", "UTF8", "--locale=C", "--no-sync"])
        .stdin(Stdio::null())
        .output()
        .map_err(io_err(format!("cannot run {}", bin.join("initdb").display())))?;
    if !out.status.success() {
        return Err(TestPostgresError::Initdb(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    if options.tls {
        make_certificates(dir, run_as)?;
    }
    let mut last = String::new();
    for _ in 0..PORT_ATTEMPTS {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(io_err("cannot find a free port"))?
            .port();
        let server = launch(bin, run_as, dir, port, options)?;
        match wait_ready(server, port, &dir.join("server.log"))? {
            Ok(server) => return Ok((server, port)),
            // It exited: most likely another process took the port; try another.
            Err(why) => last = why,
        }
    }
    Err(TestPostgresError::Start(last))
}

/// Starts `postgres` on the cluster in `dir`, its output appended to `server.log`.
fn launch(
    bin: &Path,
    run_as: Option<(u32, u32)>,
    dir: &Path,
    port: u16,
    options: &TestPostgresOptions,
) -> Result<Child, TestPostgresError> {
    let log_path = dir.join("server.log");
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(io_err(format!("cannot open {}", log_path.display())))?;
    let log2 = log.try_clone().map_err(io_err("cannot duplicate the log file"))?;
    let durability = if options.durable { "on" } else { "off" };
    let tls: Vec<String> = if options.tls {
        vec![
            "-c".into(),
            "ssl=on".into(),
            "-c".into(),
            format!("ssl_cert_file={}", dir.join("server.crt").display()),
            "-c".into(),
            format!("ssl_key_file={}", dir.join("server.key").display()),
        ]
    } else {
        Vec::new()
    };
    command(bin.join("postgres"), run_as, dir)
        .arg("-D")
        .arg(dir.join("data"))
        .arg("-p")
        .arg(port.to_string())
        .arg("-k")
        .arg(dir)
        .args(["-c", "listen_addresses=127.0.0.1", "-c", &format!("fsync={durability}")])
        .args(["-c", &format!("synchronous_commit={durability}"), "-c", &format!("full_page_writes={durability}")])
        .args(&tls)
        .envs(options.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        .spawn()
        .map_err(io_err(format!("cannot run {}", bin.join("postgres").display())))
}

/// Waits until the server accepts connections (`Ok(Ok(server))`), exits
/// (`Ok(Err(why))`: the caller may try another port), or takes longer than
/// [`START_DEADLINE`] (an error; the server is stopped).
fn wait_ready(mut server: Child, port: u16, log_path: &Path) -> Result<Result<Child, String>, TestPostgresError> {
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    let mut config: postgres::Config = match url.parse() {
        Ok(c) => c,
        Err(e) => {
            stop_server(server);
            return Err(TestPostgresError::Postgres(e.to_string()));
        }
    };
    config.connect_timeout(Duration::from_secs(1));
    let deadline = Instant::now() + START_DEADLINE;
    loop {
        match server.try_wait() {
            Ok(Some(status)) => return Ok(Err(format!("postgres exited ({status}): {}", log_tail(log_path)))),
            Ok(None) => {}
            Err(e) => {
                stop_server(server);
                return Err(io_err("cannot watch the server")(e));
            }
        }
        match config.connect(postgres::NoTls) {
            Ok(_) => return Ok(Ok(server)),
            Err(e) if Instant::now() >= deadline => {
                stop_server(server);
                return Err(TestPostgresError::Start(format!(
                    "no connection within {START_DEADLINE:?} ({}): {}",
                    describe(&e),
                    log_tail(log_path)
                )));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// The end of the server's log, for error messages.
fn log_tail(path: &Path) -> String {
    let mut text = String::new();
    let _ = fs::File::open(path).and_then(|mut f| f.read_to_string(&mut text));
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(10)..].join("\n")
}

/// Sends a signal (`INT`, `KILL`) with `kill(1)`: the standard library
/// sends only `SIGKILL` and this crate forbids `unsafe`.
fn signal(pid: u32, name: &str) -> std::io::Result<()> {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if status.success() { Ok(()) } else { Err(std::io::Error::other(format!("kill -{name} {pid}: {status}"))) }
}

/// A CA (`ca.pem`) and the server's certificate and key for `localhost` and
/// `127.0.0.1` (`server.crt`, `server.key` of mode 0600, owned by the server's user).
fn make_certificates(dir: &Path, run_as: Option<(u32, u32)>) -> Result<(), TestPostgresError> {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let tls = |e: rcgen::Error| TestPostgresError::Start(format!("cannot make the test server's certificate: {e}"));
    let ca_key = KeyPair::generate().map_err(tls)?;
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(tls)?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(rcgen::DnType::CommonName, "gpool test PostgreSQL CA");
    let ca = ca.self_signed(&ca_key).map_err(tls)?;
    let key = KeyPair::generate().map_err(tls)?;
    let params = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).map_err(tls)?;
    let cert = params.signed_by(&key, &ca, &ca_key).map_err(tls)?;
    let write = |name: &str, text: String, mode: u32| -> Result<(), TestPostgresError> {
        let path = dir.join(name);
        fs::write(&path, text).map_err(io_err(format!("cannot write {}", path.display())))?;
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).map_err(io_err("chmod"))?;
        if let Some((uid, gid)) = run_as {
            std::os::unix::fs::chown(&path, Some(uid), Some(gid)).map_err(io_err("chown"))?;
        }
        Ok(())
    };
    write("ca.pem", ca.pem(), 0o644)?;
    write("server.crt", cert.pem(), 0o644)?;
    write("server.key", key.serialize_pem(), 0o600)
}

/// Fast shutdown (`SIGINT`: the server disconnects its clients and stops),
/// `SIGKILL` after [`STOP_DEADLINE`]. `SIGTERM` would be a "smart" shutdown,
/// which waits for every client to disconnect, and tests often still hold
/// connections.
fn fast_shutdown(mut server: Child) {
    let _ = signal(server.id(), "INT");
    let deadline = Instant::now() + STOP_DEADLINE;
    loop {
        match server.try_wait() {
            Ok(Some(_)) | Err(_) => return,
            Ok(None) if Instant::now() >= deadline => {
                let _ = server.kill();
                let _ = server.wait();
                return;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// Stops a server that is not (yet) a [`TestPostgres`].
fn stop_server(mut server: Child) {
    let _ = server.kill();
    let _ = server.wait();
}

/// A process that, once its stdin closes (our process exited without
/// dropping the server), stops the server and removes its directory.
fn spawn_watchdog(server: u32, dir: &Path) -> Result<(Child, ChildStdin), TestPostgresError> {
    // It ignores the signals a terminal or a test runner sends the whole
    // process group (Ctrl-C), so that it outlives the test process to clean up.
    const SCRIPT: &str = r#"
        trap '' INT TERM HUP
        cat >/dev/null
        kill -INT "$1" 2>/dev/null
        i=0
        while kill -0 "$1" 2>/dev/null && [ "$i" -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
        kill -0 "$1" 2>/dev/null && kill -KILL "$1"
        rm -rf "$2"
    "#;
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(SCRIPT)
        .arg("gpool-pg-watchdog")
        .arg(server.to_string())
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(io_err("cannot run sh for the server's watchdog"))?;
    match child.stdin.take() {
        // Nothing is written: the open pipe only tells the watchdog we are alive.
        Some(stdin) => Ok((child, stdin)),
        None => {
            stop_server(child);
            Err(TestPostgresError::Start("the watchdog has no stdin".into()))
        }
    }
}
