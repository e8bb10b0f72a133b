//! One inotify instance for every `logs -f` of the daemon, and a cap on
//! how many a caller may hold.
//!
//! The kernel gives each user (root too) at most `max_user_instances`
//! inotify instances, 128 by default; one per follow stream let 130
//! `gpool logs -f` make `inotify_init` fail for every root process of the
//! host. Here every stream shares one instance: a file's watch is added by
//! its first follower and removed with its last, and each follower hears of
//! changes through a `watch` channel (a counter), so a change between its
//! read and its wait is never missed. Where inotify cannot be had, a
//! follower looks again every second instead.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::StreamExt as _;
use inotify::{Inotify, WatchDescriptor, WatchMask, Watches};
use tokio::sync::watch;

/// The most follow streams one caller (one token, or one local account) holds at once.
pub(super) const MAX_FOLLOWS: usize = 32;

/// The daemon's follow streams (`AppState::log_watch`).
#[derive(Default)]
pub struct LogWatch {
    shared: Mutex<Option<Shared>>,
    follows: Mutex<HashMap<String, usize>>,
}

struct Shared {
    watches: Watches,
    /// By watch descriptor id: the descriptor, the channel its changes bump, its followers.
    files: HashMap<i32, (WatchDescriptor, watch::Sender<u64>, usize)>,
}

/// A follower's count, held while its stream lives.
pub struct Follow {
    watch: Arc<LogWatch>,
    caller: String,
}

impl Drop for Follow {
    fn drop(&mut self) {
        let mut follows = self.watch.follows.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = follows.get_mut(&self.caller) {
            *n -= 1;
            if *n == 0 {
                follows.remove(&self.caller);
            }
        }
    }
}

/// One follower's watch of one file; the watch goes with its last follower.
pub struct Watched {
    pub changes: watch::Receiver<u64>,
    watch: Arc<LogWatch>,
    id: i32,
}

impl Drop for Watched {
    fn drop(&mut self) {
        let mut shared = self.watch.shared.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(s) = shared.as_mut() else { return };
        let last = s.files.get_mut(&self.id).is_some_and(|f| {
            f.2 -= 1;
            f.2 == 0
        });
        if last && let Some((wd, _, _)) = s.files.remove(&self.id) {
            let _ = s.watches.remove(wd);
        }
    }
}

impl LogWatch {
    /// Counts a follow stream for `caller`; `Err` says why not, past [`MAX_FOLLOWS`].
    pub fn enter(self: &Arc<Self>, caller: String) -> Result<Follow, String> {
        let mut follows = self.follows.lock().unwrap_or_else(PoisonError::into_inner);
        let n = follows.entry(caller.clone()).or_insert(0);
        if *n >= MAX_FOLLOWS {
            return Err(format!(
                "you follow {MAX_FOLLOWS} logs already, the most one caller may; end one (or read without --follow)"
            ));
        }
        *n += 1;
        Ok(Follow { watch: Arc::clone(self), caller })
    }

    /// Watches `path` for writes; `None` where inotify cannot be had (then look again now and then).
    pub fn watch(self: &Arc<Self>, path: &Path) -> Option<Watched> {
        let mut shared = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        if shared.is_none() {
            *shared = self.start();
        }
        let s = shared.as_mut()?;
        let wd = s.watches.add(path, WatchMask::MODIFY | WatchMask::CLOSE_WRITE).ok()?;
        let id = wd.get_watch_descriptor_id();
        let entry = s.files.entry(id).or_insert_with(|| (wd, watch::channel(0).0, 0));
        entry.2 += 1;
        Some(Watched { changes: entry.1.subscribe(), watch: Arc::clone(self), id })
    }

    /// The shared instance, and the task that hands its events on.
    fn start(self: &Arc<Self>) -> Option<Shared> {
        let inotify = Inotify::init().map_err(|e| tracing::warn!("log follows poll each second: inotify: {e}")).ok()?;
        let mut events = inotify.into_event_stream(vec![0u8; 16 * 1024]).ok()?;
        let watches = events.watches();
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            while let Some(Ok(event)) = events.next().await {
                let Some(me) = me.upgrade() else { return };
                let shared = me.shared.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some((_, tx, _)) = shared.as_ref().and_then(|s| s.files.get(&event.wd.get_watch_descriptor_id()))
                {
                    tx.send_modify(|n| *n += 1);
                }
            }
        });
        Some(Shared { watches, files: HashMap::new() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn followers_share_one_watch_and_a_caller_is_capped() {
        let w = Arc::new(LogWatch::default());
        let held: Vec<Follow> = (0..MAX_FOLLOWS).map(|_| w.enter("ana".into()).expect("under the cap")).collect();
        assert!(w.enter("ana".into()).is_err_and(|e| e.contains("32 logs")));
        assert!(w.enter("bob".into()).is_ok(), "another caller has a cap of its own");
        drop(held);
        assert!(w.enter("ana".into()).is_ok(), "ended follows count no more");

        let dir = std::env::temp_dir().join(format!("gpool-log-watch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("rank0.out");
        std::fs::write(&file, b"").expect("file");
        let (Some(mut a), Some(b)) = (w.watch(&file), w.watch(&file)) else { panic!("inotify is there") };
        assert_eq!(a.id, b.id, "one watch for the file");
        std::fs::write(&file, b"more").expect("write");
        tokio::time::timeout(std::time::Duration::from_secs(10), a.changes.changed())
            .await
            .expect("told of the write")
            .expect("open");
        drop((a, b));
        let shared = w.shared.lock().unwrap_or_else(PoisonError::into_inner);
        assert!(shared.as_ref().is_some_and(|s| s.files.is_empty()), "the last follower removed the watch");
        drop(shared);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
