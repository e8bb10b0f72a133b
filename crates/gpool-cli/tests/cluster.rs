//! End-to-end tests of a cluster: `gpool serve` on PostgreSQL (a leader and
//! a standby), three `gpool agent`s as separate processes on 127.0.0.x
//! addresses with simulated GPUs, real jobs, `kill -9` of an agent and of the
//! leader. PostgreSQL is a real server started on loopback by the test
//! (`gpool_testpg`); `.ci/run` installs it.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::Duration;

use common::fleet::*;
use common::*;
use serde_json::{Value, json};

#[test]
fn three_agents_run_500_jobs_through_an_agent_crash_and_a_leader_failover_all_over_tls() {
    let s = Scratch::new("cluster");
    // One CA for both control planes (issue 12): agents pin its fingerprint.
    let ca_dir = s.0.join("ca");
    // PostgreSQL over TLS too, verified against its own CA.
    let options = gpool_testpg::TestPostgresOptions { tls: true, ..Default::default() };
    let pg = gpool_testpg::TestPostgres::start_with(options).expect("PostgreSQL (apt-get install -y postgresql)");
    let db = format!(
        "{}?sslmode=require&sslrootcert={}",
        pg.fresh_database("cluster").expect("database"),
        pg.ca_file().expect("its CA").display()
    );
    let free =
        || std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("port");
    let (pa, pb) = (free(), free());
    let plane = |dir: &str, port: u16| -> Vec<String> {
        ["serve", "--db", &db, "--listen", &format!("127.0.0.1:{port}"), "--lease", "3s", "--tls-dir"]
            .iter()
            .map(|x| x.to_string())
            .chain([ca_dir.display().to_string(), "--data-dir".into(), s.0.join(dir).display().to_string()])
            .collect()
    };
    let mut leader = Proc::spawn(&plane("cp-a", pa), &s.0.join("cp-a.log"));
    let a_url = leader.url.recv_timeout(Duration::from_secs(60)).expect("the first control plane leads");
    assert!(a_url.starts_with("https://"), "{a_url}");
    let ca = ca_dir.join("ca.pem");
    let fingerprint = {
        use sha2::Digest;
        let pem = std::fs::read(&ca).expect("the CA");
        let cert = ureq::tls::Certificate::from_pem(&pem).expect("PEM");
        format!("sha256:{}", sha2::Sha256::digest(cert.der()).iter().map(|b| format!("{b:02x}")).collect::<String>())
    };
    let standby = Proc::spawn(&plane("cp-b", pb), &s.0.join("cp-b.log"));
    assert!(
        standby.url.recv_timeout(Duration::from_millis(500)).is_err(),
        "a standby does not serve while another leads"
    );
    // Issue 47: but it holds its port from its start, so no local program can
    // take it, and answers there 503 standby until it leads, in TLS as the
    // leader does (issue 43: health checks tell it from a dead port).
    let trusted: ureq::Agent = {
        let pem = std::fs::read(&ca).expect("the CA");
        let cert = ureq::tls::Certificate::from_pem(&pem).expect("PEM").to_owned();
        let roots = ureq::tls::RootCerts::Specific(std::sync::Arc::new(vec![cert]));
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(5)))
            .tls_config(ureq::tls::TlsConfig::builder().root_certs(roots).build())
            .build()
            .into()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let (status, standby_header, answer) = loop {
        if let Ok(mut r) = trusted.get(format!("https://127.0.0.1:{pb}/healthz")).call() {
            let header = r.headers().contains_key("x-gpool-standby");
            break (r.status().as_u16(), header, r.body_mut().read_to_string().unwrap_or_default());
        }
        assert!(std::time::Instant::now() < deadline, "the standby never held its port");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status == 503 && standby_header && answer.contains("standby"), "{status} {answer}");
    assert!(std::net::TcpListener::bind(("127.0.0.1", pb)).is_err(), "nobody else can bind the standby's port");
    let admin = std::fs::read_to_string(s.0.join("cp-a/admin.token")).expect("token").trim().to_string();
    let mut api = Api::trusting(&a_url, &admin, Some(&ca));
    let node_token = node_token_file(&api, &s.0);
    let servers = format!("https://127.0.0.1:{pa},https://127.0.0.1:{pb}");
    let agent = |i: usize| -> Proc {
        let args: Vec<String> = [
            "agent",
            "--server",
            &servers,
            "--ca-fingerprint",
            &fingerprint,
            "--token-file",
            &node_token,
            "--node-name",
            &format!("n{i}"),
            "--advertise-addr",
            &format!("127.0.0.{}", i + 2),
            "--simulate-gpus",
            "4xH100-80GB",
            "--sample-interval",
            "1s",
            "--data-dir",
        ]
        .iter()
        .map(|x| x.to_string())
        .chain([s.0.join(format!("agent-{i}")).display().to_string()])
        .collect();
        Proc::spawn(&args, &s.0.join(format!("agent-{i}.log")))
    };
    let mut agents: Vec<Proc> = (0..3).map(agent).collect();
    until("three registered nodes", Duration::from_secs(60), || {
        api.nodes().iter().filter(|n| n["agent"].as_str().is_some_and(|a| a.starts_with("remote, epoch"))).count() == 3
    });

    // 500 jobs: one in ten a gang of two 4-GPU replicas (so across two nodes), the rest 1 or 2 GPUs.
    let script = job_script(&s.0);
    let specs: Vec<Value> = (0..500)
        .map(|i| {
            let secs = ["0.1", "0.2", "0.4"][i % 3];
            let command =
                vec!["bash".to_string(), script.display().to_string(), s.0.display().to_string(), secs.to_string()];
            if i % 10 == 0 {
                json!({"command": command, "replicas": 2, "resources": {"nvidia.com/gpu": 4}})
            } else {
                json!({"command": command, "resources": {"nvidia.com/gpu": 1 + (i % 2)}})
            }
        })
        .collect();
    let ids: Vec<u64> = api.post("/api/v1/jobs", &json!({"jobs": specs}))["ids"]
        .as_array()
        .expect("ids")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    assert_eq!(ids.len(), 500);

    // kill -9 of an agent midway: its node goes down, its jobs are requeued and finish elsewhere.
    until("100 jobs done", Duration::from_secs(180), || api.succeeded() >= 100);
    agents[1].kill9();
    until("n1 declared down", Duration::from_secs(30), || {
        api.nodes().iter().any(|n| n["name"] == "n1" && n["state"] == "down")
    });
    let done_while_down = api.succeeded();
    until("progress without n1", Duration::from_secs(60), || api.succeeded() >= done_while_down + 20);
    // Restarted, it re-joins.
    agents[1] = agent(1);
    until("n1 back up", Duration::from_secs(30), || {
        api.nodes().iter().any(|n| {
            n["name"] == "n1" && n["state"] == "up" && n["agent"].as_str().is_some_and(|a| a.starts_with("remote"))
        })
    });

    // kill -9 of the leader: the standby takes over, the agents follow.
    until("250 jobs done", Duration::from_secs(180), || api.succeeded() >= 250);
    leader.kill9();
    let failover_ms =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
    let b_url = standby.url.recv_timeout(Duration::from_secs(30)).expect("the standby takes over within seconds");
    api = Api::trusting(&b_url, &admin, Some(&ca));
    until("every job done", Duration::from_secs(300), || api.succeeded() == 500);

    // What the jobs themselves saw.
    let violations = lines(&s.0.join("violations"));
    assert!(violations.is_empty(), "{violations:#?}");
    let jobs = api.jobs().expect("jobs");
    assert_eq!(jobs.len(), 500);
    let restarted: BTreeSet<u64> =
        jobs.iter().filter(|j| j["restarts"].as_u64().unwrap_or(0) > 0).filter_map(|j| j["id"].as_u64()).collect();
    let mut done: BTreeMap<(u64, u32), usize> = BTreeMap::new();
    for l in lines(&s.0.join("done")) {
        let f: Vec<&str> = l.split_whitespace().collect();
        let (Some(job), Some(rank)) = (f.first().and_then(|x| x.parse().ok()), f.get(2).and_then(|x| x.parse().ok()))
        else {
            panic!("bad record {l:?}")
        };
        *done.entry((job, rank)).or_default() += 1;
    }
    for j in &jobs {
        let id = j["id"].as_u64().expect("id");
        for rank in 0..j["spec"]["replicas"].as_u64().unwrap_or(1) as u32 {
            let n = done.get(&(id, rank)).copied().unwrap_or(0);
            if restarted.contains(&id) {
                // Requeued after its node failed: it ran to the end at least once, never twice at once.
                assert!(n >= 1, "job {id} rank {rank} never completed");
            } else {
                assert_eq!(n, 1, "job {id} rank {rank} completed {n} times");
            }
        }
    }
    assert!(!restarted.is_empty(), "the agent crash requeued some jobs");
    // Gangs: rank 0's node is everyone's MASTER_ADDR, and the replicas ran on two nodes.
    let addr = |node: &str| format!("127.0.0.{}", node.trim_start_matches('n').parse::<usize>().expect("node") + 2);
    let mut gangs: BTreeMap<(String, String), Vec<Vec<String>>> = BTreeMap::new();
    for l in lines(&s.0.join("masters")) {
        let f: Vec<String> = l.split_whitespace().map(String::from).collect();
        assert_eq!(f.len(), 7, "{l}");
        gangs.entry((f[0].clone(), f[1].clone())).or_default().push(f);
    }
    let complete: Vec<_> = gangs.values().filter(|g| g.len() == 2).collect();
    assert!(complete.len() >= 50, "every gang's two replicas recorded themselves: {}", complete.len());
    for g in complete {
        let rank0 = g.iter().find(|f| f[2] == "0").expect("rank 0");
        let nodes: BTreeSet<&str> = g.iter().map(|f| f[3].as_str()).collect();
        assert_eq!(nodes.len(), 2, "a 2×4-GPU gang on 4-GPU nodes spans two nodes: {g:?}");
        for f in g {
            assert_eq!(f[4], addr(&rank0[3]), "MASTER_ADDR is rank 0's node: {g:?}");
            assert_eq!(f[5], rank0[5], "one MASTER_PORT: {g:?}");
        }
    }
    // Logs: the agents ship them to whichever control plane leads; jobs that
    // ended after the fail-over have theirs on the new leader.
    let after: Vec<&Value> = jobs
        .iter()
        .filter(|j| {
            j["ended_at"].as_str().and_then(gpool_api::time::parse_rfc3339).is_some_and(|t| t > failover_ms + 2_000)
        })
        .take(5)
        .collect();
    assert!(!after.is_empty(), "jobs ended after the fail-over");
    for j in after {
        let id = j["id"].as_u64().expect("id");
        let want = format!("job {id} attempt {}", j["attempt"]);
        let mut seen = String::new();
        until(&format!("job {id}'s log on the new leader"), Duration::from_secs(30), || {
            seen = api
                .http
                .get(format!("{}/api/v1/jobs/{id}/logs", api.base))
                .header("Authorization", format!("Bearer {}", api.token))
                .call()
                .ok()
                .and_then(|mut r| r.body_mut().read_to_string().ok())
                .unwrap_or_default();
            seen.contains(&want)
        });
    }
    drop(agents);
}

#[test]
fn a_drained_node_takes_nothing_new_and_a_failed_node_requeues_or_fails_its_jobs_as_they_asked() {
    let s = Scratch::new("drain");
    // gpool up (a local node with one GPU) accepts a remote agent too.
    let d = Daemon::start(&s.0.join("data"), "1xH100-80GB", &["--lease", "1s"]);
    let api = Api::new(&d.url, &d.token);
    let node_token = node_token_file(&api, &s.0);
    let agent_args = |dir: &str| -> Vec<String> {
        [
            "agent",
            "--server",
            &d.url,
            "--token-file",
            &node_token,
            "--node-name",
            "far",
            "--label",
            "where=far",
            "--simulate-gpus",
            "2xH100-80GB",
            "--data-dir",
        ]
        .iter()
        .map(|x| x.to_string())
        .chain([s.0.join(dir).display().to_string()])
        .collect()
    };
    let mut agent = Proc::spawn(&agent_args("agent"), &s.0.join("agent.log"));
    until("the remote node", Duration::from_secs(30), || {
        api.nodes().iter().any(|n| n["name"] == "far" && n["state"] == "up")
    });
    let far = |extra: Value| -> Value {
        let mut spec = json!({"command": "echo \"attempt $GPOOL_ATTEMPT on $GPOOL_NODE\"; sleep 600", "resources": {"nvidia.com/gpu": 1}, "nodeSelector": {"where": "far"}});
        if let (Some(o), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        spec
    };
    let must_not_repeat =
        api.post("/api/v1/jobs", &far(json!({"onNodeFailure": "fail"})))["ids"][0].as_u64().expect("id");
    let may_repeat = api.post("/api/v1/jobs", &far(json!({})))["ids"][0].as_u64().expect("id");
    until("both running on far", Duration::from_secs(30), || {
        [must_not_repeat, may_repeat]
            .iter()
            .all(|id| api.get(&format!("/api/v1/jobs/{id}")).is_some_and(|j| j["state"] == "running"))
    });
    // Drained: the running jobs stay, a new one waits.
    let view = api.post("/api/v1/nodes/far/drain", &json!({}));
    assert_eq!(view["state"], "draining", "{view}");
    let waits = api.post(
        "/api/v1/jobs",
        &json!({"command": "true", "resources": {"nvidia.com/gpu": 1}, "nodeSelector": {"where": "far"}}),
    )["ids"][0]
        .as_u64()
        .expect("id");
    let j = api.get(&format!("/api/v1/jobs/{waits}")).expect("job");
    assert_eq!(j["state"], "pending", "{j}");
    assert_eq!(api.get(&format!("/api/v1/jobs/{may_repeat}")).expect("job")["state"], "running");
    // A user cannot drain.
    let user = d.token_for("bob");
    let (status, _) = d.req("POST", "/api/v1/nodes/far/resume", &user, None);
    assert_eq!(status, 403);
    // The node fails: one job fails as it asked, the other goes back to the queue.
    agent.kill9();
    until("far down", Duration::from_secs(30), || {
        api.nodes().iter().any(|n| n["name"] == "far" && n["state"] == "down")
    });
    let failed = api.get(&format!("/api/v1/jobs/{must_not_repeat}")).expect("job");
    assert_eq!(failed["state"], "failed", "{failed}");
    assert!(failed["reason"].as_str().is_some_and(|r| r.contains("onNodeFailure")), "{failed}");
    let requeued = api.get(&format!("/api/v1/jobs/{may_repeat}")).expect("job");
    assert_eq!(requeued["state"], "pending", "{requeued}");
    // Back, resumed: the requeued job runs again, on its second attempt; the drain held while it was away.
    let mut agent = Proc::spawn(&agent_args("agent"), &s.0.join("agent.log"));
    until("far back", Duration::from_secs(30), || {
        api.nodes().iter().any(|n| n["name"] == "far" && n["state"] == "draining")
    });
    api.post("/api/v1/nodes/far/resume", &json!({}));
    until("the requeued job runs again", Duration::from_secs(30), || {
        api.get(&format!("/api/v1/jobs/{may_repeat}")).is_some_and(|j| j["state"] == "running" && j["attempt"] == 2)
    });
    for id in [may_repeat, waits] {
        d.req("POST", &format!("/api/v1/jobs/{id}/cancel"), &d.token, None);
    }
    agent.kill9();
}

/// Issue 11, failure 3: a leader stopped with SIGSTOP keeps its database
/// session and lock; the standby must still take over, before the agents'
/// leases run out, so running jobs are neither killed nor run twice, and the
/// old leader, once continued, must step down (to a standby) rather than write.
#[test]
fn a_stopped_leader_is_replaced_and_running_jobs_survive() {
    let Pair { s, pg: _pg, ports: (pa, pb), mut leader, standby, admin, api: _api, _agent, job: id } =
        pair_with_a_running_job("hung-leader", "10s", "25");

    // The leader stops, as a hung or paused process would, keeping its session.
    let pid = leader.child.id().to_string();
    assert!(Command::new("kill").args(["-STOP", &pid]).status().expect("kill").success());
    let b_url = standby.url.recv_timeout(Duration::from_secs(30)).expect("the standby takes over a stopped leader");
    let b = Api::new(&b_url, &admin);
    until("the node re-registered with the new leader", Duration::from_secs(30), || {
        b.nodes().iter().any(|n| n["state"] == "up")
    });
    // Continued, the old leader finds its session ended and steps down: it
    // becomes a standby, without having written anything after.
    assert!(Command::new("kill").args(["-CONT", &pid]).status().expect("kill").success());
    until("the old leader steps down", Duration::from_secs(30), || {
        std::fs::read_to_string(s.0.join("cp-a.log")).is_ok_and(|l| l.contains("stepping down"))
    });
    assert!(leader.child.try_wait().expect("a").is_none(), "it stays, as a standby");
    // The CLI given both control planes, the old leader first, moves to the one that answers.
    let servers = format!("http://127.0.0.1:{pa},http://127.0.0.1:{pb}");
    let env = [("GPOOL_SERVER", servers.as_str()), ("GPOOL_TOKEN", admin.as_str())];
    let (code, out, err) = gpool(&["show", &id.to_string(), "-o", "json"], &env);
    assert_eq!(code, Some(0), "the CLI reaches the new leader: {out}{err}");
    assert!(out.contains(&format!("\"id\": {id}")), "{out}");
    // The job was never killed: it ends once, as attempt 1.
    until("the job succeeds", Duration::from_secs(60), || {
        b.get(&format!("/api/v1/jobs/{id}")).is_some_and(|j| j["state"] == "succeeded")
    });
    let job = b.get(&format!("/api/v1/jobs/{id}")).expect("job");
    assert_eq!(job["attempt"], 1, "never restarted: {job}");
    assert_eq!(lines(&s.0.join("done")).len(), 1, "ran to its end once");
    assert!(lines(&s.0.join("violations")).is_empty(), "{:?}", lines(&s.0.join("violations")));
}

/// Issue 11, failure 2: a 5-second PostgreSQL outage (every session ended,
/// new ones refused) stopped the leader and the standby for good, and the
/// agents' shims then killed every running job. Now both control planes
/// reconnect, one leads again, and a job running through the outage ends
/// once, never restarted nor failed.
#[test]
fn a_database_outage_is_ridden_out_without_losing_a_running_job() {
    let Pair { s, pg, ports: (pa, pb), leader: mut a, standby: mut b, admin, api, _agent, job: id } =
        pair_with_a_running_job("db-outage", "20s", "20");

    // The outage: every session of the database ended, new ones refused, for 5 s.
    let mut root = postgres::Client::connect(&pg.url(), postgres::NoTls).expect("admin connection");
    root.batch_execute(
        "ALTER DATABASE db_outage ALLOW_CONNECTIONS false; \
         SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'db_outage'",
    )
    .expect("outage begins");
    until("the leader steps down", Duration::from_secs(10), || !api.leads());
    std::thread::sleep(Duration::from_secs(5));
    root.batch_execute("ALTER DATABASE db_outage ALLOW_CONNECTIONS true").expect("outage ends");

    // Both control planes are still there, one leads again, and the job ends once.
    let urls = [format!("http://127.0.0.1:{pa}"), format!("http://127.0.0.1:{pb}")];
    let mut done = None;
    until("the job succeeds under whichever control plane leads", Duration::from_secs(90), || {
        done = urls
            .iter()
            .find_map(|u| Api::new(u, &admin).get(&format!("/api/v1/jobs/{id}")).filter(|j| j["state"] == "succeeded"));
        done.is_some()
    });
    let job = done.expect("job");
    assert_eq!(job["attempt"], 1, "never killed nor restarted by the outage: {job}");
    assert!(a.child.try_wait().expect("a").is_none(), "the old leader did not exit");
    assert!(b.child.try_wait().expect("b").is_none(), "the standby did not exit");
    assert_eq!(lines(&s.0.join("done")).len(), 1, "ran to its end once");
    assert!(lines(&s.0.join("violations")).is_empty(), "{:?}", lines(&s.0.join("violations")));
}

/// A leader and a standby on a fresh PostgreSQL database, one agent with two
/// simulated GPUs, and one job of `secs` seconds, running.
struct Pair {
    s: Scratch,
    pg: gpool_testpg::TestPostgres,
    ports: (u16, u16),
    leader: Proc,
    standby: Proc,
    admin: String,
    api: Api,
    _agent: Proc,
    job: u64,
}

fn pair_with_a_running_job(name: &str, lease: &str, secs: &str) -> Pair {
    let s = Scratch::new(name);
    let pg = gpool_testpg::TestPostgres::start().expect("PostgreSQL (apt-get install -y postgresql)");
    let db = pg.fresh_database(&name.replace('-', "_")).expect("database");
    let free =
        || std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("port");
    let (pa, pb) = (free(), free());
    let plane = |dir: &str, port: u16| -> Vec<String> {
        ["serve", "--db", &db, "--listen", &format!("127.0.0.1:{port}"), "--lease", lease, "--data-dir"]
            .iter()
            .map(|x| x.to_string())
            .chain([s.0.join(dir).display().to_string()])
            .collect()
    };
    let leader = Proc::spawn(&plane("cp-a", pa), &s.0.join("cp-a.log"));
    let a_url = leader.url.recv_timeout(Duration::from_secs(60)).expect("the first control plane leads");
    let standby = Proc::spawn(&plane("cp-b", pb), &s.0.join("cp-b.log"));
    let admin = std::fs::read_to_string(s.0.join("cp-a/admin.token")).expect("token").trim().to_string();
    let api = Api::new(&a_url, &admin);
    let node_token = node_token_file(&api, &s.0);
    let servers = format!("http://127.0.0.1:{pa},http://127.0.0.1:{pb}");
    let agent_dir = s.0.join("agent");
    let agent = Proc::spawn(
        &[
            "agent",
            "--server",
            &servers,
            "--token-file",
            &node_token,
            "--node-name",
            "n0",
            "--simulate-gpus",
            "2xH100-80GB",
            "--data-dir",
            &agent_dir.display().to_string(),
        ]
        .map(String::from),
        &s.0.join("agent.log"),
    );
    until("the node registered", Duration::from_secs(60), || api.nodes().len() == 1);
    let script = job_script(&s.0);
    let command = ["bash".to_string(), script.display().to_string(), s.0.display().to_string(), secs.to_string()];
    let job =
        api.post("/api/v1/jobs", &json!({"jobs": [{"command": command, "resources": {"nvidia.com/gpu": 1}}]}))["ids"]
            [0]
        .as_u64()
        .expect("id");
    until("the job runs", Duration::from_secs(30), || {
        api.get(&format!("/api/v1/jobs/{job}")).is_some_and(|j| j["state"] == "running")
    });
    Pair { s, pg, ports: (pa, pb), leader, standby, admin, api, _agent: agent, job }
}
