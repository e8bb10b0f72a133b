//! The daemons' logs (`gpool up | serve | agent`): levels, a filter, and
//! text or JSON lines on standard error, through `tracing`.
//!
//! The filter is `GPOOL_LOG`, else `RUST_LOG`, in `tracing`'s syntax
//! (`info`, `gpool_daemon=debug,warn`); `info` when neither is set. Each
//! state change of a job or node is one `info` line of target
//! `gpool::event` with its `kind`, `job` and `user` as fields (the event
//! stream's, logged when it is committed).

use std::io::IsTerminal as _;

use clap::{Args, ValueEnum};
use tracing_subscriber::EnvFilter;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogFormat {
    /// One line a record: time, level, target, message and fields.
    #[default]
    Text,
    /// One JSON object a line (for Loki, Elasticsearch, journald's JSON).
    Json,
}

/// How a daemon logs.
#[derive(Args, Debug, Clone)]
pub(crate) struct LogArgs {
    /// Log lines as text or JSON (on standard error); the level filter is GPOOL_LOG, else RUST_LOG (e.g. info, gpool_daemon=debug,warn).
    #[arg(long, value_enum, default_value_t)]
    log_format: LogFormat,
}

impl LogArgs {
    /// Installs the logger for this process. A bad filter is refused,
    /// naming the variable, rather than silently logging everything or
    /// nothing.
    pub(crate) fn init(&self) -> anyhow::Result<()> {
        let (var, spec) = match (std::env::var("GPOOL_LOG"), std::env::var("RUST_LOG")) {
            (Ok(s), _) => ("GPOOL_LOG", s),
            (Err(_), Ok(s)) => ("RUST_LOG", s),
            _ => ("", "info".to_string()),
        };
        let filter = EnvFilter::builder().parse(&spec).map_err(|e| {
            anyhow::anyhow!("{var}={spec:?} is not a log filter ({e}); e.g. info, or gpool_daemon=debug,warn")
        })?;
        let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
        let installed = match self.log_format {
            LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).try_init(),
            LogFormat::Json => builder.json().flatten_event(true).with_current_span(false).try_init(),
        };
        installed.map_err(|e| anyhow::anyhow!("cannot install the logger: {e}"))
    }
}
