//! Room kept on the state database's disk for the day it fills up.
//!
//! Jobs' output, other programs, or the database itself can fill the disk
//! that holds `state.db`; SQLite then refuses every write, and a control
//! plane that cannot commit must stop. So the store keeps a file of zeros
//! (`<database>.reserve`) beside the database. When a commit fails because
//! the disk is full, the store deletes that file and commits again: the
//! control plane goes on, and reports [`Store::disk_full`](crate::Store::disk_full)
//! so that it refuses what would fill the disk further (new submissions)
//! until the disk has room again. Asked while the disk is full, the store
//! looks at the free space: once the disk has twice the reserve free, it
//! writes the file again and says the disk is no longer full.
//!
//! Opening a store on a disk already full still works: if the reserve
//! cannot be written, the store starts with the disk reported full. What
//! it cannot survive is a disk full to the last byte with the reserve
//! already spent: the commit fails, with an error naming the disk.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The reserve file and whether it is spent.
pub(crate) struct Reserve {
    path: PathBuf,
    bytes: u64,
    spent: bool,
}

impl Reserve {
    /// Keeps `bytes` beside the database at `db` (writing the file if it is
    /// missing or short). A disk without that room starts out spent.
    pub(crate) fn keep(db: &Path, bytes: u64) -> Reserve {
        let mut path = db.as_os_str().to_owned();
        path.push(".reserve");
        let mut r = Reserve { path: path.into(), bytes, spent: false };
        let present = std::fs::metadata(&r.path).is_ok_and(|m| m.len() >= bytes);
        if !present && !r.write() {
            r.spent = true;
        }
        r
    }

    pub(crate) fn spent(&self) -> bool {
        self.spent
    }

    /// Frees the reserve for a commit that found the disk full; false if it
    /// was already spent (nothing more to free).
    pub(crate) fn spend(&mut self) -> bool {
        if self.spent {
            return false;
        }
        self.spent = true;
        std::fs::remove_file(&self.path).is_ok()
    }

    /// Takes the reserve back once the disk has room for it twice over.
    /// Cheap when not spent (no system call); a `statvfs` when spent.
    pub(crate) fn refill(&mut self) {
        if !self.spent {
            return;
        }
        let dir = self.path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let free = rustix::fs::statvfs(dir).map(|s| s.f_bavail.saturating_mul(s.f_frsize)).unwrap_or(0);
        if free >= self.bytes.saturating_mul(2) && self.write() {
            self.spent = false;
        }
    }

    /// Writes the file with real blocks (a sparse file reserves nothing);
    /// removes what it wrote when the disk has no room for all of it.
    fn write(&self) -> bool {
        let written = (|| -> std::io::Result<()> {
            let mut f = File::create(&self.path)?;
            let chunk = vec![0u8; 1 << 20];
            let mut left = self.bytes;
            while left > 0 {
                let n = left.min(chunk.len() as u64) as usize;
                f.write_all(&chunk[..n])?;
                left -= n as u64;
            }
            f.sync_all()
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&self.path);
        }
        written.is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reserve_is_written_spent_once_and_taken_back_when_there_is_room() {
        let dir = std::env::temp_dir().join(format!("gpool-reserve-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let db = dir.join("state.db");
        let mut r = Reserve::keep(&db, 64 << 10);
        let file = dir.join("state.db.reserve");
        assert_eq!(std::fs::metadata(&file).expect("written").len(), 64 << 10);
        assert!(!r.spent());
        assert!(r.spend());
        assert!(!file.exists());
        assert!(!r.spend(), "nothing more to free");
        r.refill();
        assert!(!r.spent(), "a temporary directory has room for 128 KiB");
        assert!(file.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
