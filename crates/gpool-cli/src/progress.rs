//! A progress bar on standard error, drawn only when it is a terminal.

use std::io::{IsTerminal, Write};
use std::time::Instant;

pub(crate) struct Progress {
    label: String,
    started: Instant,
    enabled: bool,
    last_drawn: Option<Instant>,
}

impl Progress {
    pub(crate) fn new(label: &str) -> Progress {
        Progress {
            label: label.to_string(),
            started: Instant::now(),
            enabled: std::io::stderr().is_terminal(),
            last_drawn: None,
        }
    }

    /// Draws `done` of `total` (at most ten times a second).
    pub(crate) fn update(&mut self, done: u64, total: u64) {
        if !self.enabled {
            return;
        }
        let now = Instant::now();
        if done < total && self.last_drawn.is_some_and(|t| now.duration_since(t).as_millis() < 100) {
            return;
        }
        self.last_drawn = Some(now);
        let frac = if total == 0 { 1.0 } else { done as f64 / total as f64 };
        let width = 30;
        let filled = ((frac * width as f64) as usize).min(width);
        let elapsed = self.started.elapsed().as_secs_f64();
        let eta = if frac > 0.0 { elapsed / frac - elapsed } else { 0.0 };
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r{} [{}{}] {:>5.1}% {done}/{total} {elapsed:.0}s, ~{eta:.0}s left ",
            self.label,
            "#".repeat(filled),
            "-".repeat(width - filled),
            frac * 100.0
        );
        if done >= total {
            let _ = writeln!(err);
        }
        let _ = err.flush();
    }
}
