//! Images pulled with someone's registry login, and whose they are.
//!
//! A node's container runtime runs as root with one image store for all
//! users. An image pulled with a user's login to a private registry stays in
//! that store, and a later `run --pull missing` of the same name by anyone
//! would find it there and run it without asking the registry. So the agent
//! remembers, per image name, the user whose login pulled it
//! (`DATA_DIR/private-images`, kept across restarts), and any other user's
//! job that names it pulls it again with its own login (or none) before it
//! runs: the registry decides, as it would on a node that never saw it.
//! Public images pulled without a login stay shared, as in any cache.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The file under the data directory: `IMAGE\tUSER` a line.
pub const FILE: &str = "private-images";
/// The owner of an image pulled ahead for a job that has not started: no user is one.
const PULLED_AHEAD: &str = "*pulled ahead*";

pub struct PrivateImages {
    path: PathBuf,
    owners: Mutex<BTreeMap<String, String>>,
}

impl PrivateImages {
    /// The record under `data_dir`; a missing or unreadable file is an empty record.
    pub fn load(data_dir: &Path) -> PrivateImages {
        let path = data_dir.join(FILE);
        let owners = std::fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_once('\t'))
            .map(|(i, u)| (i.to_string(), u.to_string()))
            .collect();
        PrivateImages { path, owners: Mutex::new(owners) }
    }

    /// Whether a job of `user` (with a login of its own or not) must pull
    /// `image` from its registry even if the node has it; records `user` as
    /// its owner when the job pulls with a login.
    pub fn must_pull(&self, image: &str, user: Option<&str>, with_login: bool) -> bool {
        let user = user.unwrap_or("");
        let mut owners = self.owners.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let someone_elses = owners.get(image).is_some_and(|o| o != user);
        if with_login {
            self.record(&mut owners, image, user);
        }
        someone_elses
    }

    /// An image pulled ahead with a login for a job not yet started (`prefetch`):
    /// private to nobody yet, so every job, its owner's included, asks the
    /// registry before it runs it; the first that pulls with a login owns it.
    pub fn pulled_ahead_with_a_login(&self, image: &str) {
        let mut owners = self.owners.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !owners.contains_key(image) {
            self.record(&mut owners, image, PULLED_AHEAD);
        }
    }

    /// Sets `image`'s owner and writes the file, when that changes it.
    fn record(&self, owners: &mut BTreeMap<String, String>, image: &str, owner: &str) {
        if owners.get(image).map(String::as_str) == Some(owner) {
            return;
        }
        owners.insert(image.to_string(), owner.to_string());
        let text: String = owners.iter().map(|(i, u)| format!("{i}\t{u}\n")).collect();
        let tmp = self.path.with_extension("tmp");
        if let Err(e) = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, &self.path)) {
            tracing::warn!("cannot record {image} as pulled with a login: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_pulled_with_a_login_is_pulled_again_for_anyone_else_across_restarts() {
        let dir = std::env::temp_dir().join(format!("gpool-private-images-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let p = PrivateImages::load(&dir);
        assert!(!p.must_pull("busybox", Some("bob"), false), "public images stay shared");
        assert!(!p.must_pull("reg.example/ana/secret:1", Some("ana"), true), "ana pulls with her login");
        assert!(!p.must_pull("reg.example/ana/secret:1", Some("ana"), false), "and runs it again freely");
        let again = PrivateImages::load(&dir);
        assert!(again.must_pull("reg.example/ana/secret:1", Some("bob"), false), "bob must ask the registry");
        assert!(again.must_pull("reg.example/ana/secret:1", None, false));
        assert!(again.must_pull("reg.example/ana/secret:1", Some("bob"), true), "bob pulls it with his login");
        assert!(again.must_pull("reg.example/ana/secret:1", Some("ana"), false), "then it is bob's pull on record");
        again.pulled_ahead_with_a_login("reg.example/team/model:2");
        assert!(again.must_pull("reg.example/team/model:2", Some("ana"), true), "pulled ahead: everyone asks");
        assert!(again.must_pull("reg.example/team/model:2", Some("bob"), false), "then it is ana's");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
