//! The agent's images: a container replica's image kept in the node's
//! cache, and images pulled ahead for jobs that will start here.

use crate::node::agent::{Agent, ReplicaKey};
use crate::protocol::Launch;

impl Agent {
    /// Records a use of `image` and, in the background, trims the cache to its limit,
    /// keeping every image a live replica (this one included) runs.
    pub(super) fn keep_cache(&self, cache: std::sync::Arc<crate::node::image_cache::ImageCache>, image: String) {
        cache.used(&image, crate::node::clock::wall_ms());
        let keys: Vec<ReplicaKey> =
            self.replicas.lock().unwrap_or_else(std::sync::PoisonError::into_inner).keys().copied().collect();
        let mut in_use: std::collections::BTreeSet<String> =
            keys.into_iter().filter_map(|k| crate::node::container::image_of(&self.run_dir(k))).collect();
        in_use.insert(image);
        let _ = std::thread::Builder::new().name("image-cache".into()).spawn(move || cache.evict(&in_use));
    }

    /// Pulls `image` in the background for a job that will start here once
    /// its GPUs are free (one pull per image at a time; an image already here
    /// is left alone). The shim finds it here when the job starts.
    pub fn prefetch(&self, image: String, registry_auth: Option<crate::protocol::Secret>) {
        let Some(rt) = self.cfg.container.clone().filter(|rt| rt.broken().is_none()) else { return };
        if registry_auth.is_some() {
            self.private_images.pulled_ahead_with_a_login(&image);
        }
        if !self.prefetching.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(image.clone()) {
            return;
        }
        let name: String = image.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' { c } else { '_' }).collect();
        let dir = self.cfg.data_dir.join("prefetch").join(name);
        let inflight = self.prefetching.clone();
        let _ = std::thread::Builder::new().name("prefetch".into()).spawn(move || {
            if std::fs::create_dir_all(&dir).is_ok() {
                let auth = registry_auth.and_then(|a| crate::node::container::write_auth(&dir, &a.0).ok());
                let launch = Launch { image: Some(image.clone()), ..Launch::default() };
                if let Some(steps) = rt.pull_steps(&launch, auth.as_deref(), false) {
                    match crate::node::pull::run(&dir, &steps, &dir.join("output.log"), |_| {}) {
                        Ok(()) => tracing::info!("pulled {image} ahead of the job that waits for it"),
                        Err(crate::node::pull::PullEnd::Failed(why)) => tracing::warn!("pulling ahead: {why}"),
                        Err(crate::node::pull::PullEnd::Signalled(_)) => {}
                    }
                }
                let _ = std::fs::remove_dir_all(&dir);
            }
            inflight.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&image);
        });
    }
}
