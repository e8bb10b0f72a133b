//! The node's image cache (`--image-cache-size`): the images gpool ran
//! here, when each was last used, and their size; when they hold more
//! than the limit, the least recently used image that no live replica
//! runs is removed (`podman|docker rmi`), then the next, until they fit.
//! Images gpool never ran here (the operator's own) are never touched.
//! Last uses are kept in `DATA/images.json`, so the order survives a
//! restart of the agent.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use crate::node::container::Runtime;

/// An image the cache knows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cached {
    pub image: String,
    pub bytes: u64,
    pub last_used_ms: i64,
    /// A live replica runs it.
    pub in_use: bool,
}

/// The images to remove so that the rest fit in `limit` bytes: least
/// recently used first, never one in use (if those alone exceed the limit,
/// everything else goes and the cache stays over it).
pub fn plan_eviction(images: &[Cached], limit: u64) -> Vec<String> {
    let mut total: u64 = images.iter().map(|c| c.bytes).sum();
    let mut order: Vec<&Cached> = images.iter().filter(|c| !c.in_use).collect();
    order.sort_by(|a, b| a.last_used_ms.cmp(&b.last_used_ms).then_with(|| a.image.cmp(&b.image)));
    let mut out = Vec::new();
    for c in order {
        if total <= limit {
            break;
        }
        total -= c.bytes;
        out.push(c.image.clone());
    }
    out
}

/// The cache of one node.
#[derive(Debug)]
pub struct ImageCache {
    file: PathBuf,
    limit: u64,
    runtime: Runtime,
    /// One eviction at a time; last uses are read and written under it.
    lock: Mutex<()>,
}

impl ImageCache {
    pub fn new(data_dir: &Path, limit: u64, runtime: Runtime) -> ImageCache {
        ImageCache { file: data_dir.join("images.json"), limit, runtime, lock: Mutex::new(()) }
    }

    fn read(&self) -> BTreeMap<String, i64> {
        std::fs::read(&self.file).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
    }

    fn write(&self, uses: &BTreeMap<String, i64>) {
        if let Ok(text) = serde_json::to_vec_pretty(uses) {
            let tmp = self.file.with_extension("json.tmp");
            if std::fs::write(&tmp, text).is_ok() {
                let _ = std::fs::rename(&tmp, &self.file);
            }
        }
    }

    /// Records that a replica starts in `image` now.
    pub fn used(&self, image: &str, now_ms: i64) {
        let _held = self.lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut uses = self.read();
        uses.insert(image.to_string(), now_ms);
        self.write(&uses);
    }

    /// The size of `image` here, if it is here.
    fn size(&self, image: &str) -> Option<u64> {
        let out = Command::new(&self.runtime.program)
            .args(["image", "inspect", "--format", "{{.Size}}", image])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .ok()?;
        if !out.status.success() {
            return None;
        }
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    }

    /// Removes least recently used images until the cache fits; `in_use`: the images live replicas run.
    /// Returns the images removed.
    pub fn evict(&self, in_use: &BTreeSet<String>) -> Vec<String> {
        let _held = self.lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut uses = self.read();
        let mut images = Vec::new();
        for (image, at) in &uses {
            // One no longer here (removed by hand) is forgotten.
            if let Some(bytes) = self.size(image) {
                images.push(Cached { image: image.clone(), bytes, last_used_ms: *at, in_use: in_use.contains(image) });
            }
        }
        uses.retain(|i, _| images.iter().any(|c| &c.image == i));
        let mut removed = Vec::new();
        for image in plan_eviction(&images, self.limit) {
            let ok = Command::new(&self.runtime.program)
                .args(["rmi", &image])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                tracing::info!("image cache over {} bytes: removed {image}, the least recently used", self.limit);
                uses.remove(&image);
                removed.push(image);
            }
        }
        self.write(&uses);
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(image: &str, mb: u64, at: i64, in_use: bool) -> Cached {
        Cached { image: image.into(), bytes: mb << 20, last_used_ms: at, in_use }
    }

    #[test]
    fn the_least_recently_used_images_no_job_needs_go_first_until_the_rest_fit() {
        let images = [c("a", 400, 10, false), c("b", 300, 5, true), c("c", 200, 20, false), c("d", 100, 1, false)];
        assert_eq!(plan_eviction(&images, 1000 << 20), Vec::<String>::new(), "fits");
        assert_eq!(plan_eviction(&images, 700 << 20), ["d", "a"], "d (oldest) is not enough; a next; b is in use");
        assert_eq!(plan_eviction(&images, 100 << 20), ["d", "a", "c"], "in-use b stays though over the limit");
    }
}
