//! A replica's output, kept within its log limit: the shim reads the job's
//! standard output and error through pipes and appends them to the log
//! files up to the limit (counted from the file's size, so over all
//! attempts), then writes one marker line and discards the rest. It always
//! keeps reading, so a job never blocks on its output, and a log that cannot
//! be written (a full disk) costs the job nothing but that output.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Bytes read at a time.
const CHUNK: usize = 64 * 1024;

/// What became of one stream.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Copied {
    /// Bytes written to the log.
    pub kept: u64,
    /// Bytes read past the limit, or that could not be written.
    pub dropped: u64,
    /// Why writing stopped early (the log could not be opened or written).
    pub error: Option<String>,
}

/// Appends what `from` yields to the file at `log`, at most `limit` bytes in
/// the file, until `from` ends.
pub fn copy_limited(mut from: impl Read, log: &Path, limit: u64) -> Copied {
    let mut out = Copied::default();
    let mut file = match OpenOptions::new().create(true).append(true).open(log) {
        Ok(f) => Some(f),
        Err(e) => {
            out.error = Some(format!("cannot open {}: {e}", log.display()));
            None
        }
    };
    let mut size = file.as_ref().and_then(|f| f.metadata().ok()).map_or(0, |m| m.len());
    let mut marked = size >= limit;
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let room = limit.saturating_sub(size).min(n as u64) as usize;
        let mut kept = 0;
        if room > 0
            && let Some(f) = file.as_mut()
        {
            match f.write_all(&buf[..room]) {
                Ok(()) => {
                    size += room as u64;
                    kept = room;
                }
                Err(e) => {
                    out.error = Some(format!("cannot write {}: {e}", log.display()));
                    file = None;
                }
            }
        }
        out.kept += kept as u64;
        out.dropped += (n - kept) as u64;
        if size >= limit && !marked {
            marked = true;
            if let Some(f) = file.as_mut() {
                let _ =
                    writeln!(f, "\n== gpool: this log reached its limit of {limit} bytes; later output is discarded");
            }
        }
    }
    out
}

/// The two streams of a replica, copied by two threads until the job and
/// everything it started are gone.
pub struct Copiers {
    threads: Vec<std::thread::JoinHandle<Copied>>,
}

impl Copiers {
    pub fn start(
        stdout: impl Read + Send + 'static,
        stderr: impl Read + Send + 'static,
        logs: [PathBuf; 2],
        limit: u64,
    ) -> std::io::Result<Copiers> {
        let [out_log, err_log] = logs;
        let a =
            std::thread::Builder::new().name("stdout".into()).spawn(move || copy_limited(stdout, &out_log, limit))?;
        let b =
            std::thread::Builder::new().name("stderr".into()).spawn(move || copy_limited(stderr, &err_log, limit))?;
        Ok(Copiers { threads: vec![a, b] })
    }

    /// Waits for both streams to end (every writer gone).
    pub fn finish(self) -> Vec<Copied> {
        self.threads.into_iter().filter_map(|t| t.join().ok()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("gpool-output-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("dir");
        d
    }

    #[test]
    fn output_past_the_limit_is_dropped_after_one_marker() {
        let d = scratch("limit");
        let log = d.join("rank0.out");
        let input = vec![b'x'; 300_000];
        let c = copy_limited(&input[..], &log, 100_000);
        assert_eq!((c.kept, c.dropped, c.error), (100_000, 200_000, None));
        let text = std::fs::read_to_string(&log).expect("log");
        assert_eq!(text.matches("reached its limit").count(), 1);
        assert!(text.len() < 100_200);
        // A later attempt appends nothing more: the limit counts the whole file.
        let c = copy_limited(&b"again\n"[..], &log, 100_000);
        assert_eq!((c.kept, c.dropped), (0, 6));
        assert_eq!(std::fs::read_to_string(&log).expect("log").matches("reached its limit").count(), 1);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_log_that_cannot_be_written_drains_the_job_anyway() {
        // /dev/full: every write fails with "no space left on device".
        let input = vec![b'y'; 500_000];
        let c = copy_limited(&input[..], Path::new("/dev/full"), u64::MAX);
        assert_eq!(c.kept, 0);
        assert!(c.error.is_some_and(|e| e.contains("cannot write")), "the full disk is named");
    }

    #[test]
    fn output_under_the_limit_is_kept_whole() {
        let d = scratch("under");
        let log = d.join("rank0.err");
        let c = copy_limited(&b"hello\nworld\n"[..], &log, 1 << 30);
        assert_eq!((c.kept, c.dropped), (12, 0));
        assert_eq!(std::fs::read_to_string(&log).expect("log"), "hello\nworld\n");
        let _ = std::fs::remove_dir_all(&d);
    }
}
