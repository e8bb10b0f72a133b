//! The slow-disk fault: the database server's `fsync` and `fdatasync` calls
//! take longer while it holds, as on a disk whose write cache is full or a
//! network volume that stalls.
//!
//! The disk that matters is the database's: its server (started durable,
//! `fsync=on`, `synchronous_commit=on`) flushes its write-ahead log at every
//! commit, so every turn of the leader and every renewal of its leadership
//! waits on it. The agents never call `fsync` (their records need to survive
//! their own crash, not the machine's, which ends their jobs anyway).
//!
//! A small library preloaded into the server (`LD_PRELOAD`) wraps both
//! calls: each first reads a flag file holding a delay in milliseconds and
//! sleeps that long when it exists. It is compiled from C at the start of a
//! run, so the run needs a C compiler (`cc`, which building gpool needed).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;

const SOURCE: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static void slow(void) {
    const char *flag = getenv("GPOOL_CHAOS_SLOW_DISK");
    if (flag == NULL) return;
    int fd = open(flag, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    char buf[32] = {0};
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    long ms = n > 0 ? atol(buf) : 0;
    if (ms <= 0) return;
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0) {}
}

int fsync(int fd) {
    static int (*real)(int);
    if (real == NULL) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    slow();
    return real(fd);
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (real == NULL) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    slow();
    return real(fd);
}
"#;

/// The compiled library and the flag file that turns the delay on.
pub(crate) struct SlowDisk {
    pub library: PathBuf,
    pub flag: PathBuf,
}

impl SlowDisk {
    /// Compiles the library into `dir` (readable by the database's user).
    pub(crate) fn build(dir: &Path) -> anyhow::Result<SlowDisk> {
        let src = dir.join("slow-disk.c");
        let library = dir.join("slow-disk.so");
        std::fs::write(&src, SOURCE)?;
        let out = Command::new("cc")
            .args(["-shared", "-fPIC", "-O2", "-o"])
            .arg(&library)
            .arg(&src)
            .arg("-ldl")
            .output()
            .context("the slow-disk fault compiles a small library with `cc` (apt-get install -y gcc)")?;
        anyhow::ensure!(
            out.status.success(),
            "cc could not build the slow-disk library: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Ok(SlowDisk { library, flag: dir.join("slow-disk") })
    }

    /// The environment that makes a process's flushes slow while the fault holds.
    pub(crate) fn env(&self) -> Vec<(String, String)> {
        vec![
            ("LD_PRELOAD".into(), self.library.display().to_string()),
            ("GPOOL_CHAOS_SLOW_DISK".into(), self.flag.display().to_string()),
        ]
    }

    /// Every flush takes `delay_ms` longer from now on (`Some`), or no longer (`None`).
    pub(crate) fn set(&self, delay_ms: Option<u64>) -> anyhow::Result<()> {
        match delay_ms {
            Some(ms) => std::fs::write(&self.flag, ms.to_string())?,
            None => {
                let _ = std::fs::remove_file(&self.flag);
            }
        }
        Ok(())
    }
}
