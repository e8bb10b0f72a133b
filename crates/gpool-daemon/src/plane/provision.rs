//! Runs node pool provider programs (`ProvisionOrder`) for the controller's
//! shell, each on a thread of its own and within its time limit, and tells
//! the controller how each ended (`Event::Provisioned`). Like Slurm's
//! `ResumeProgram`/`SuspendProgram`: the program's exit status is all that
//! counts; its output goes to `DATA_DIR/pools/logs/NODE-create.log` (or
//! `-delete.log`), whose end is quoted when it fails.

use std::io::{Read as _, Seek as _, SeekFrom};
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::plane::controller::{Event, ProvisionOp, ProvisionOrder};

/// The URL the API listens on, known once it is bound (`--listen …:0`
/// picks a port): new nodes are told it as `GPOOL_SERVER`.
#[derive(Clone, Default)]
pub struct BoundUrl(Arc<(Mutex<Option<String>>, Condvar)>);

impl BoundUrl {
    pub fn set(&self, url: &str) {
        let (m, c) = &*self.0;
        if let Ok(mut u) = m.lock() {
            *u = Some(url.to_string());
            c.notify_all();
        }
    }

    /// The URL, waiting at most `limit` for the API to be bound.
    fn get(&self, limit: Duration) -> Option<String> {
        let (m, c) = &*self.0;
        let guard = m.lock().ok()?;
        let (guard, _) = c.wait_timeout_while(guard, limit, |u| u.is_none()).ok()?;
        guard.clone()
    }
}

/// Carries out provider programs.
pub struct Provisioner {
    events: Mutex<Sender<Event>>,
    logs: PathBuf,
    url: BoundUrl,
}

impl Provisioner {
    pub fn new(events: Sender<Event>, data_dir: &std::path::Path, url: BoundUrl) -> Provisioner {
        Provisioner { events: Mutex::new(events), logs: data_dir.join("pools").join("logs"), url }
    }
}

impl crate::plane::controller::Provision for Provisioner {
    fn provision(&self, order: ProvisionOrder) {
        let tx = match self.events.lock() {
            Ok(tx) => tx.clone(),
            Err(_) => return,
        };
        let logs = self.logs.clone();
        let node = order.node.clone();
        let op = order.op;
        let url = self.url.clone();
        let spawned = std::thread::Builder::new().name("provision".into()).spawn(move || {
            let mut order = order;
            if let Some(u) = url.get(Duration::from_secs(30)) {
                for (k, v) in &mut order.env {
                    if k == "GPOOL_SERVER" {
                        *v = u.clone();
                    }
                }
            }
            let result = run(&order, &logs);
            let _ = tx.send(Event::Provisioned { node: order.node, op: order.op, result });
        });
        if let Err(e) = spawned
            && let Ok(tx) = self.events.lock()
        {
            let _ = tx.send(Event::Provisioned { node, op, result: Err(format!("cannot start a thread: {e}")) });
        }
    }
}

/// Runs one program to its end or its time limit.
fn run(order: &ProvisionOrder, logs: &std::path::Path) -> Result<(), String> {
    let Some((program, args)) = order.argv.split_first() else { return Err("the program is empty".into()) };
    std::fs::create_dir_all(logs).map_err(|e| format!("cannot create {}: {e}", logs.display()))?;
    let what = match order.op {
        ProvisionOp::Create => "create",
        ProvisionOp::Delete => "delete",
    };
    let log_path = logs.join(format!("{}-{what}.log", order.node));
    let log = std::fs::File::create(&log_path).map_err(|e| format!("cannot create {}: {e}", log_path.display()))?;
    let err_log = log.try_clone().map_err(|e| e.to_string())?;
    let mut child = Command::new(program)
        .args(args)
        .envs(order.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err_log)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot run {program:?}: {e}"))?;
    // A watchdog kills the program's whole process group at its time limit.
    let done = Arc::new(AtomicBool::new(false));
    let timed_out = Arc::new(AtomicBool::new(false));
    let pid = child.id();
    {
        let (done, timed_out, limit) = (done.clone(), timed_out.clone(), order.timeout);
        let _ = std::thread::Builder::new().name("provision-timer".into()).spawn(move || {
            std::thread::sleep(limit);
            if !done.load(Ordering::SeqCst) {
                timed_out.store(true, Ordering::SeqCst);
                if let Some(pgid) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) {
                    let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
                }
            }
        });
    }
    let status = child.wait();
    done.store(true, Ordering::SeqCst);
    let tail = tail(&log_path);
    if timed_out.load(Ordering::SeqCst) {
        return Err(format!("{program} did not finish within {} and was killed{tail}", human(order.timeout)));
    }
    match status {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("{program} exited with {s}{tail}")),
        Err(e) => Err(format!("waiting for {program}: {e}")),
    }
}

/// The last lines of a program's log, for a failure message.
fn tail(path: &std::path::Path) -> String {
    let Ok(mut f) = std::fs::File::open(path) else { return String::new() };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(400)));
    let mut s = String::new();
    let _ = f.read_to_string(&mut s);
    let s = s.trim();
    if s.is_empty() { String::new() } else { format!(": {}", s.replace('\n', " | ")) }
}

fn human(d: Duration) -> String {
    gpool_core::time::human_duration(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(argv: &[&str], timeout_ms: u64) -> ProvisionOrder {
        ProvisionOrder {
            op: ProvisionOp::Create,
            pool: "p".into(),
            node: "p-1".into(),
            argv: argv.iter().map(|s| s.to_string()).collect(),
            env: vec![("GPOOL_NODE".into(), "p-1".into())],
            timeout: Duration::from_millis(timeout_ms),
        }
    }

    #[test]
    fn programs_succeed_fail_with_their_output_or_time_out() {
        let dir = std::env::temp_dir().join(format!("gpool-provision-{}", std::process::id()));
        assert_eq!(run(&order(&["sh", "-c", "test \"$GPOOL_NODE\" = p-1"], 10_000), &dir), Ok(()));
        let e =
            run(&order(&["sh", "-c", "echo no capacity in us-east-1a >&2; exit 3"], 10_000), &dir).expect_err("fails");
        assert!(e.contains("exit status: 3") && e.contains("no capacity in us-east-1a"), "{e}");
        let e = run(&order(&["sh", "-c", "sleep 30"], 200), &dir).expect_err("times out");
        assert!(e.contains("did not finish within"), "{e}");
        let e = run(&order(&["/nonexistent/program"], 1000), &dir).expect_err("missing");
        assert!(e.contains("cannot run"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
