//! The shipper: replicas' output sent to the control plane as it is
//! written (inotify on the job directories), from the offset the control
//! plane has, so that `gpool logs -f` works the same on a cluster.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::node::conn::{Conn, Current};

/// Where a log file is shipped from and to.
struct Shipped {
    job: u64,
    rank: u32,
    stream: &'static str,
    offset: u64,
    /// The session whose control plane has everything up to `offset` (a new
    /// one, after a fail-over, may have less: it is asked first).
    session: Option<u64>,
}

/// Ships replicas' output to the control plane: inotify on the job
/// directories, retried at a few seconds' interval while the control plane
/// cannot take it.
pub(crate) fn spawn_shipper(data_dir: PathBuf, current: Current, node: String) -> std::io::Result<()> {
    let jobs = data_dir.join("jobs");
    std::fs::create_dir_all(&jobs)?;
    let ino = inotify::Inotify::init()?;
    ino.watches().add(&jobs, inotify::WatchMask::CREATE)?;
    std::thread::Builder::new().name("shipper".into()).spawn(move || ship(jobs, ino, current, &node))?;
    Ok(())
}

fn ship(jobs: PathBuf, mut ino: inotify::Inotify, current: Current, node: &str) {
    let mut files: BTreeMap<PathBuf, Shipped> = BTreeMap::new();
    let mut watched: BTreeMap<inotify::WatchDescriptor, PathBuf> = BTreeMap::new();
    let mut buf = vec![0u8; 16 * 1024];
    let add_dir = |dir: &Path, ino: &inotify::Inotify, watched: &mut BTreeMap<inotify::WatchDescriptor, PathBuf>| {
        if let Ok(wd) = ino
            .watches()
            .add(dir, inotify::WatchMask::MODIFY | inotify::WatchMask::CLOSE_WRITE | inotify::WatchMask::CREATE)
        {
            watched.insert(wd, dir.to_path_buf());
        }
    };
    // Job directories that exist already (an agent restarted while jobs ran).
    if let Ok(rd) = std::fs::read_dir(&jobs) {
        for e in rd.filter_map(Result::ok) {
            add_dir(&e.path(), &ino, &mut watched);
        }
    }
    loop {
        // Every file with something unshipped, then wait for more (or retry soon).
        if let Ok(rd) = std::fs::read_dir(&jobs) {
            for job in rd.filter_map(Result::ok) {
                let Some(id) = job.file_name().to_str().and_then(|n| n.parse::<u64>().ok()) else { continue };
                let Ok(inner) = std::fs::read_dir(job.path()) else { continue };
                for f in inner.filter_map(Result::ok) {
                    let name = f.file_name();
                    let Some(n) = name.to_str() else { continue };
                    let parsed = n.strip_prefix("rank").and_then(|r| r.rsplit_once('.')).and_then(|(r, ext)| {
                        Some((
                            r.parse::<u32>().ok()?,
                            if ext == "err" {
                                "stderr"
                            } else if ext == "out" {
                                "stdout"
                            } else {
                                return None;
                            },
                        ))
                    });
                    if let Some((rank, stream)) = parsed {
                        files.entry(f.path()).or_insert(Shipped { job: id, rank, stream, offset: 0, session: None });
                    }
                }
            }
        }
        let conn = current.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        let mut behind = false;
        if let Some((session, conn)) = conn {
            for (path, s) in files.iter_mut() {
                behind |= !ship_file(&conn, session, path, s, node);
            }
        } else {
            behind = true;
        }
        // Wait for a write (or a new job directory), or retry in a few seconds.
        let timeout = if behind { 2_000 } else { 10_000 };
        let ts = rustix::event::Timespec { tv_sec: timeout / 1000, tv_nsec: 0 };
        let mut fds = [rustix::event::PollFd::new(&ino, rustix::event::PollFlags::IN)];
        let _ = rustix::event::poll(&mut fds, Some(&ts));
        if let Ok(events) = ino.read_events(&mut buf) {
            let mut new_dirs = Vec::new();
            for e in events {
                if watched.get(&e.wd).is_none_or(|d| *d == jobs)
                    && e.mask.contains(inotify::EventMask::CREATE)
                    && let Some(name) = e.name
                {
                    new_dirs.push(jobs.join(name));
                }
            }
            for d in new_dirs {
                add_dir(&d, &ino, &mut watched);
            }
        }
    }
}

/// Sends what the control plane lacks of one file; false if it could not.
fn ship_file(conn: &Conn, session: u64, path: &Path, s: &mut Shipped, node: &str) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else { return true };
    let len = f.metadata().map_or(0, |m| m.len());
    let mut probe = s.session != Some(session);
    while s.offset < len || probe {
        let mut chunk = vec![0u8; (len.saturating_sub(s.offset) as usize).min(1 << 20)];
        if f.seek(SeekFrom::Start(s.offset)).is_err() || f.read_exact(&mut chunk).is_err() {
            return false;
        }
        let r = conn
            .http
            .post(format!("{}/agent/v1/logs", conn.base))
            .query("job", s.job.to_string())
            .query("rank", s.rank.to_string())
            .query("stream", s.stream)
            .query("offset", s.offset.to_string())
            .query("node", node)
            .header("Authorization", conn.auth())
            .send(&chunk[..]);
        match r {
            Ok(mut r) if r.status().is_success() || r.status().as_u16() == 409 => {
                // Either way the answer says how much the control plane has.
                let v: serde_json::Value = r.body_mut().read_json().unwrap_or_default();
                match v["length"].as_u64() {
                    Some(n) => s.offset = n,
                    None => return false,
                }
                probe = false;
                s.session = Some(session);
            }
            // Refused for good (not this node's replica, or past the log's limit): not sent again.
            Ok(r) if matches!(r.status().as_u16(), 403 | 404 | 413) => {
                s.offset = len;
                return true;
            }
            _ => return false,
        }
    }
    true
}
