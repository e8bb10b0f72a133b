//! The cluster a chaos run disturbs: a real PostgreSQL server, two `gpool
//! serve` (a leader and a standby) and N `gpool agent`s with simulated GPUs,
//! each agent talking to the control planes through proxies that can be cut.
//! Every process is the `gpool` binary the run was given (`--gpool`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::proxy::Proxy;
use super::slow_disk::SlowDisk;

/// A `gpool` process that can be killed, stopped and started again with the same arguments.
pub(crate) struct Proc {
    exe: PathBuf,
    args: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
}

impl Proc {
    fn new(exe: &Path, args: Vec<String>, log: PathBuf) -> Proc {
        Proc { exe: exe.into(), args, log, child: None }
    }

    pub(crate) fn start(&mut self) -> anyhow::Result<()> {
        let out = std::fs::OpenOptions::new().create(true).append(true).open(&self.log)?;
        let child = Command::new(&self.exe)
            .args(&self.args)
            .stdout(out.try_clone()?)
            .stderr(out)
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("start {}", self.exe.display()))?;
        self.child = Some(child);
        Ok(())
    }

    pub(crate) fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends `SIG` to the process; an error when it could not be sent (a
    /// fault the run believes it injected must have happened).
    pub(crate) fn signal(&self, sig: &str) -> anyhow::Result<()> {
        let Some(c) = &self.child else { anyhow::bail!("kill -{sig}: the process is not running") };
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(c.id().to_string())
            .status()
            .with_context(|| format!("run kill -{sig} {}", c.id()))?;
        anyhow::ensure!(status.success(), "kill -{sig} {} failed ({status})", c.id());
        Ok(())
    }

    /// Whether it has exited by itself.
    pub(crate) fn exited(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| c.try_wait().ok().flatten().is_some())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.signal("CONT");
        self.kill9();
    }
}

pub(crate) struct World {
    pub dir: PathBuf,
    pub pg: gpool_testpg::TestPostgres,
    /// Makes the database server's flushes slow (the slow-disk fault).
    pub slow_disk: SlowDisk,
    pub planes: Vec<(u16, Proc)>,
    pub agents: Vec<Proc>,
    /// The agents' data directories, each a small file system of its own
    /// (dropped after the agents, which unmounts them).
    pub disks: Vec<Disk>,
    /// Per agent, a proxy to each control plane.
    pub proxies: Vec<Vec<Proxy>>,
    /// In front of each agent's peer listener: what other agents reach it through.
    pub peer_proxies: Vec<Proxy>,
    pub token: String,
    pub http: ureq::Agent,
    /// For asking who leads: a stopped control plane accepts connections and
    /// never answers, so the question must not wait long.
    probe: ureq::Agent,
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl World {
    pub(crate) fn start(gpool: &Path, dir: &Path, agents: usize, lease: &str) -> anyhow::Result<World> {
        let slow_disk = SlowDisk::build(dir)?;
        // Durable, as in production: every commit waits for its flush, which the slow-disk fault delays.
        let options = gpool_testpg::TestPostgresOptions { durable: true, env: slow_disk.env(), tls: false };
        let pg = gpool_testpg::TestPostgres::start_with(options)
            .context("PostgreSQL for the chaos run (apt-get install -y postgresql)")?;
        let db = pg.fresh_database("chaos")?;
        let mut planes = Vec::new();
        for name in ["cp-a", "cp-b"] {
            let port = free_port()?;
            let args: Vec<String> =
                ["serve", "--db", &db, "--listen", &format!("127.0.0.1:{port}"), "--lease", lease, "--data-dir"]
                    .iter()
                    .map(|s| s.to_string())
                    .chain([dir.join(name).display().to_string()])
                    .collect();
            planes.push((port, Proc::new(gpool, args, dir.join(format!("{name}.log")))));
        }
        let http: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(5)))
            .build()
            .into();
        let probe: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_millis(300)))
            .build()
            .into();
        let mut w = World {
            dir: dir.into(),
            pg,
            slow_disk,
            planes,
            agents: Vec::new(),
            disks: Vec::new(),
            proxies: Vec::new(),
            peer_proxies: Vec::new(),
            token: String::new(),
            http,
            probe,
        };
        w.planes[0].1.start()?;
        w.until("the first control plane to lead", Duration::from_secs(60), |w| w.leader().is_some())?;
        w.planes[1].1.start()?;
        w.token = std::fs::read_to_string(dir.join("cp-a/admin.token"))?.trim().to_string();
        for i in 0..agents {
            let proxies: Vec<Proxy> = w
                .planes
                .iter()
                .map(|(port, _)| Proxy::start(SocketAddr::from(([127, 0, 0, 1], *port))))
                .collect::<Result<_, _>>()?;
            let servers = proxies.iter().map(|p| format!("http://{}", p.addr)).collect::<Vec<_>>().join(",");
            let data = dir.join(format!("agent-{i}"));
            w.disks.push(Disk::mount(&data)?);
            // Each node its own credential, bound to its name, in a file (never on a command line).
            let token = w.post(
                &format!("http://127.0.0.1:{}", w.planes[0].0),
                "/api/v1/tokens",
                &serde_json::json!({"user": format!("n{i}"), "role": "node"}),
            )?["token"]
                .as_str()
                .context("a node token")?
                .to_string();
            let peer_port = free_port()?;
            let peer_proxy = Proxy::start(SocketAddr::from(([127, 0, 0, 1], peer_port)))?;
            let token_file = dir.join(format!("agent-{i}.token"));
            std::fs::write(&token_file, token)?;
            std::fs::set_permissions(&token_file, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
            let args: Vec<String> = [
                "agent",
                "--server",
                &servers,
                "--token-file",
                &token_file.display().to_string(),
                "--node-name",
                &format!("n{i}"),
                "--advertise-addr",
                "127.0.0.1",
                "--peer-listen",
                &format!("127.0.0.1:{peer_port}"),
                "--peer-advertise",
                &peer_proxy.addr.to_string(),
                "--simulate-gpus",
                "4xH100-80GB",
                "--sample-interval",
                "1s",
                "--disk-reserve",
                "8Mi",
                "--data-dir",
            ]
            .iter()
            .map(|s| s.to_string())
            .chain([data.display().to_string()])
            .collect();
            let mut p = Proc::new(gpool, args, dir.join(format!("agent-{i}.log")));
            p.start()?;
            w.agents.push(p);
            w.proxies.push(proxies);
            w.peer_proxies.push(peer_proxy);
        }
        w.until("every node to register", Duration::from_secs(60), |w| w.nodes_up() == agents)?;
        Ok(w)
    }

    /// Waits for `done`, at most `limit`; how long it took.
    pub(crate) fn until(
        &mut self,
        what: &str,
        limit: Duration,
        mut done: impl FnMut(&mut World) -> bool,
    ) -> anyhow::Result<Duration> {
        let t0 = Instant::now();
        while !done(self) {
            if t0.elapsed() > limit {
                anyhow::bail!("timed out after {limit:?} waiting for {what} (logs in {})", self.dir.display());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(t0.elapsed())
    }

    /// The index of the control plane that answers (leads), if one does.
    pub(crate) fn leader(&self) -> Option<usize> {
        self.planes.iter().position(|(port, _)| {
            // The scrape needs no token and is answered by the controller itself; one
            // that lost its database answers it from memory, and says so: it does not lead.
            self.probe
                .get(format!("http://127.0.0.1:{port}/metrics"))
                .call()
                .is_ok_and(|r| r.status().is_success() && !r.headers().contains_key("x-gpool-store-away"))
        })
    }

    pub(crate) fn leader_url(&self) -> Option<String> {
        self.leader().map(|i| format!("http://127.0.0.1:{}", self.planes[i].0))
    }

    pub(crate) fn get(&self, path: &str) -> Option<serde_json::Value> {
        let url = self.leader_url()?;
        let mut r = self
            .http
            .get(format!("{url}{path}"))
            .header("Authorization", format!("Bearer {}", self.token))
            .call()
            .ok()?;
        if !r.status().is_success() {
            return None;
        }
        r.body_mut().with_config().limit(64 << 20).read_json().ok()
    }

    pub(crate) fn post(&self, base: &str, path: &str, body: &serde_json::Value) -> anyhow::Result<serde_json::Value> {
        let mut r = self
            .http
            .post(format!("{base}{path}"))
            .header("Authorization", format!("Bearer {}", self.token))
            .send_json(body)?;
        let status = r.status().as_u16();
        let v: serde_json::Value = r.body_mut().read_json().unwrap_or(serde_json::Value::Null);
        anyhow::ensure!(status < 300, "POST {path}: {status} {v}");
        Ok(v)
    }

    pub(crate) fn nodes_up(&self) -> usize {
        self.get("/api/v1/nodes")
            .and_then(|v| v.as_array().cloned())
            .map_or(0, |n| n.iter().filter(|n| n["state"] == "up").count())
    }

    /// How long one commit on the database server takes now (a probe table of its own).
    pub(crate) fn commit_time(&self) -> anyhow::Result<Duration> {
        let mut c = postgres::Client::connect(&self.pg.url(), postgres::NoTls)?;
        c.batch_execute("CREATE TABLE IF NOT EXISTS chaos_probe (at bigint)")?;
        let t0 = Instant::now();
        c.execute("INSERT INTO chaos_probe VALUES ($1)", &[&(t0.elapsed().as_nanos() as i64)])?;
        Ok(t0.elapsed())
    }

    /// Stops the database server as an administrator would (`true`: every
    /// session ends, new connections are refused), or starts it again on the
    /// same port with its data.
    pub(crate) fn db_stopped(&mut self, on: bool) -> anyhow::Result<()> {
        if on {
            self.pg.stop();
        } else {
            self.pg.start_again()?;
        }
        Ok(())
    }
}

/// A 128 MiB tmpfs mounted on an agent's data directory, so that filling it
/// fills only that node's disk.
pub(crate) struct Disk {
    path: PathBuf,
}

impl Disk {
    fn mount(path: &Path) -> anyhow::Result<Disk> {
        std::fs::create_dir_all(path)?;
        let out = Command::new("mount").args(["-t", "tmpfs", "-o", "size=128m", "tmpfs"]).arg(path).output()?;
        anyhow::ensure!(
            out.status.success(),
            "cannot mount a small file system on {} for the disk-full fault (run as root): {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Ok(Disk { path: path.into() })
    }

    /// Fills the file system to the last byte (`true`), or empties it again.
    pub(crate) fn fill(&self, on: bool) -> anyhow::Result<()> {
        let filler = self.path.join("filler");
        if !on {
            let _ = std::fs::remove_file(&filler);
            return Ok(());
        }
        let mut f = std::fs::File::create(&filler)?;
        // Big writes until one fails (the disk is full), then small ones for what is left.
        for size in [1 << 20, 4 << 10, 1] {
            let chunk = vec![0u8; size];
            while std::io::Write::write_all(&mut f, &chunk).is_ok() {}
        }
        let st = rustix::fs::statvfs(&self.path)?;
        anyhow::ensure!(st.f_bavail == 0, "{} still has {} blocks free", self.path.display(), st.f_bavail);
        Ok(())
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_that_cannot_be_sent_is_an_error_not_a_fault_the_run_believes_in() {
        let mut p = Proc::new(Path::new("gpool"), Vec::new(), PathBuf::from("/dev/null"));
        assert!(p.signal("STOP").is_err_and(|e| e.to_string().contains("not running")));
        let live = Command::new("sleep").arg("30").spawn().expect("sleep");
        p.child = Some(live);
        assert!(p.signal("STOP").is_ok() && p.signal("CONT").is_ok());
        p.kill9();
    }
}
