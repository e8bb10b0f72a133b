//! Issue 39: no job dies for the control plane's sake. A leader and a
//! standby `gpool serve` on a real PostgreSQL, two agents (separate
//! processes; each reaches the control planes through a proxy the test can
//! cut, and the other agent directly), four one-GPU jobs running: the
//! database stopped for ten leases, or both control planes stopped with
//! SIGSTOP for ten leases, kill no job; an agent cut off from the control
//! planes alone still has its jobs killed by the end of its lease, and they
//! run again on the other node, never twice at once. CI uses a 4 s lease;
//! `gpool-devtools bench chaos` runs the long outages (BENCHMARKS.md).

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::fleet::*;
use common::proxy::Proxy;
use common::*;
use serde_json::{Value, json};

const LEASE_S: u64 = 4;
/// Ten leases.
const OUTAGE: Duration = Duration::from_secs(10 * LEASE_S);

struct Cluster {
    s: Scratch,
    pg: gpool_testpg::TestPostgres,
    planes: Vec<Proc>,
    servers: String,
    admin: String,
    _agents: Vec<Proc>,
    /// Each agent's proxies to the two control planes.
    proxies: Vec<Vec<Proxy>>,
}

impl Cluster {
    fn start(name: &str) -> Cluster {
        let s = Scratch::new(name);
        let pg = gpool_testpg::TestPostgres::start().expect("PostgreSQL (apt-get install -y postgresql)");
        let db = pg.fresh_database(&name.replace('-', "_")).expect("database");
        let free = || std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port");
        let ports = [free(), free()];
        let lease = format!("{LEASE_S}s");
        let plane = |i: usize| -> Vec<String> {
            let listen = ports[i].to_string();
            let dir = s.0.join(format!("cp-{i}")).display().to_string();
            ["serve", "--db", &db, "--listen", &listen, "--lease", &lease, "--data-dir", &dir]
                .map(String::from)
                .to_vec()
        };
        let leader = Proc::spawn(&plane(0), &s.0.join("cp-0.log"));
        let url = leader.url.recv_timeout(Duration::from_secs(60)).expect("the first control plane leads");
        let standby = Proc::spawn(&plane(1), &s.0.join("cp-1.log"));
        let admin = std::fs::read_to_string(s.0.join("cp-0/admin.token")).expect("token").trim().to_string();
        let api = Api::new(&url, &admin);
        let token = node_token_file(&api, &s.0);
        let mut agents = Vec::new();
        let mut proxies = Vec::new();
        for n in 0..2 {
            let mine: Vec<Proxy> = ports.iter().map(|p| Proxy::start(*p).expect("proxy")).collect();
            let via = mine.iter().map(|p| format!("http://{}", p.addr)).collect::<Vec<_>>().join(",");
            let dir = s.0.join(format!("agent-{n}")).display().to_string();
            let args = [
                "agent",
                "--server",
                &via,
                "--token-file",
                &token,
                "--node-name",
                &format!("n{n}"),
                "--simulate-gpus",
                "2xH100-80GB",
                "--data-dir",
                &dir,
            ];
            agents.push(Proc::spawn(&args.map(String::from), &s.0.join(format!("agent-{n}.log"))));
            proxies.push(mine);
        }
        until("both nodes registered", Duration::from_secs(60), || {
            api.nodes().iter().filter(|n| n["state"] == "up").count() == 2
        });
        let servers = ports.iter().map(|p| format!("http://{p}")).collect::<Vec<_>>().join(",");
        Cluster { s, pg, planes: vec![leader, standby], servers, admin, _agents: agents, proxies }
    }

    /// Whichever control plane leads.
    fn api(&self) -> Option<Api> {
        self.servers.split(',').map(|u| Api::new(u, &self.admin)).find(Api::leads)
    }

    fn job(&self, id: u64) -> Option<Value> {
        self.api()?.get(&format!("/api/v1/jobs/{id}"))
    }

    /// Four one-GPU jobs of `secs` seconds, each holding its GPU and itself.
    fn four_running_jobs(&self, secs: u64) -> Vec<u64> {
        let script = job_script(&self.s.0);
        let command = [script.display().to_string(), self.s.0.display().to_string(), secs.to_string()];
        let spec = json!({"command": ["bash", command[0], command[1], command[2]], "resources": {"nvidia.com/gpu": 1}});
        let api = self.api().expect("a leader");
        let ids: Vec<u64> = api.post("/api/v1/jobs", &json!({"jobs": [spec, spec, spec, spec]}))["ids"]
            .as_array()
            .expect("ids")
            .iter()
            .filter_map(Value::as_u64)
            .collect();
        // Running by their own word: a start that an outage catches before its
        // agent takes it never ran, and would be no outage's kill.
        until("the four jobs run", Duration::from_secs(60), || {
            let started = lines(&self.s.0.join("started"));
            ids.iter().all(|id| started.iter().any(|l| l.starts_with(&format!("{id} 1 "))))
        });
        ids
    }

    /// Waits for every job to end; their final records.
    fn ended(&self, ids: &[u64], limit: Duration) -> Vec<Value> {
        let mut out = Vec::new();
        until("every job ends", limit, || {
            out = ids.iter().filter_map(|id| self.job(*id)).collect();
            out.len() == ids.len() && out.iter().all(|j| j["state"] == "succeeded" || j["state"] == "failed")
        });
        out
    }

    fn gpool(&self, args: &[&str]) -> (Option<i32>, String, String, Duration) {
        let t = Instant::now();
        let out = Command::new(BIN)
            .args(args)
            .env("GPOOL_SERVER", &self.servers)
            .env("GPOOL_TOKEN", &self.admin)
            .output()
            .expect("run gpool");
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.code(), text(&out.stdout), text(&out.stderr), t.elapsed())
    }

    fn no_violations(&self) {
        let v = lines(&self.s.0.join("violations"));
        assert!(v.is_empty(), "a job ran twice at once, or a GPU was held twice: {v:?}");
    }
}

/// Every job succeeded in its first attempt: the outage killed none.
fn succeeded_first_time(jobs: &[Value]) {
    for j in jobs {
        assert_eq!(j["state"], "succeeded", "{j}");
        assert_eq!(j["attempt"], 1, "never killed nor restarted by the outage: {j}");
    }
}

fn signal(p: &Proc, sig: &str) {
    let ok = Command::new("kill").args([sig, &p.child.id().to_string()]).status().expect("kill");
    assert!(ok.success(), "kill {sig}");
}

#[test]
fn a_database_outage_of_ten_leases_kills_no_job_and_new_work_is_refused_naming_the_database() {
    let mut c = Cluster::start("outage-db");
    let ids = c.four_running_jobs(OUTAGE.as_secs() + 25);
    c.pg.stop();
    let t = Instant::now();
    until("the leader steps down", Duration::from_secs(10), || c.api().is_none());
    // Reads are still answered, from the last state in memory, and say so.
    let reads =
        c.servers.split(',').map(|u| Api::new(u, &c.admin)).find_map(|a| a.get(&format!("/api/v1/jobs/{}", ids[0])));
    assert!(reads.is_some_and(|j| j["state"] == "running"), "a job is read from memory while the database is away");
    // New work fails fast, and says why.
    let (code, _, err, took) = c.gpool(&["submit", "--gpus", "1", "--", "true"]);
    assert_ne!(code, Some(0), "refused during the outage");
    assert!(err.contains("database") && err.contains("postgres://"), "names the database: {err}");
    // It does not wait for the database: refused within two leases of the
    // forty the outage lasts (typically 1 s; the controller may first finish
    // a store call that fails, on a loaded machine in 5 s).
    assert!(took < Duration::from_secs(2 * LEASE_S), "fails fast: {took:?}");
    std::thread::sleep(OUTAGE.saturating_sub(t.elapsed()));
    c.pg.start_again().expect("PostgreSQL back");
    let jobs = c.ended(&ids, Duration::from_secs(120));
    succeeded_first_time(&jobs);
    let (code, out, err, _) = c.gpool(&["submit", "--gpus", "1", "--", "true"]);
    assert_eq!(code, Some(0), "taken once the database is back: {out}{err}");
    // The nodes say, as their events, that they kept their jobs through the outage.
    let logs: String =
        (0..2).map(|i| std::fs::read_to_string(c.s.0.join(format!("cp-{i}.log"))).unwrap_or_default()).collect();
    assert!(logs.contains("kept its jobs running through an outage"), "a node's event records the outage");
    c.no_violations();
}

#[test]
fn both_control_planes_stopped_for_ten_leases_kill_no_job() {
    let c = Cluster::start("outage-planes");
    let ids = c.four_running_jobs(OUTAGE.as_secs() + 25);
    for p in &c.planes {
        signal(p, "-STOP");
    }
    std::thread::sleep(OUTAGE);
    for p in &c.planes {
        signal(p, "-CONT");
    }
    let jobs = c.ended(&ids, Duration::from_secs(120));
    succeeded_first_time(&jobs);
    c.no_violations();
}

#[test]
fn an_agent_cut_off_from_the_control_planes_alone_loses_its_jobs_by_its_lease_and_they_run_elsewhere() {
    let c = Cluster::start("outage-cut");
    let ids = c.four_running_jobs(20);
    // n0 loses both control planes; it still reaches n1, which still has a leader.
    for p in &c.proxies[0] {
        p.set_cut(true);
    }
    let jobs = c.ended(&ids, Duration::from_secs(120));
    let mut rerun = 0;
    for j in &jobs {
        assert_eq!(j["state"], "succeeded", "{j}");
        if j["attempt"].as_u64() > Some(1) {
            rerun += 1;
            assert_eq!(j["replicas"][0]["node"], "n1", "run again on the node that has a leader: {j}");
        }
    }
    assert!(rerun >= 1, "n0's jobs were run again elsewhere: {jobs:?}");
    // n0's own log says it was the one cut off.
    let log = std::fs::read_to_string(c.s.0.join("agent-0.log")).unwrap_or_default();
    assert!(log.contains("this node is the one cut off"), "{log}");
    c.no_violations();
}
