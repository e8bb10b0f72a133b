//! `gpool-devtools`: the tools gpool's developers run and its users do not
//! (issue 37). Each starts throwaway servers or injects faults around the
//! real `gpool` binary, which it runs as a separate process:
//!
//! - `bench chaos`: a real cluster (PostgreSQL, two control planes, agents)
//!   under seeded random faults, checked from the jobs' own records;
//! - `bench cluster`: a real `gpool serve` driven by a thousand simulated nodes;
//! - `replica-demo`: a small HTTP server for services to run as their replicas.
//!
//! `gpool` itself keeps what users run to measure their own set-up (`gpool
//! sim`, `gpool bench schedule|jobs|submit|latency|telemetry|mig|sharing|policies`);
//! docs/cli.md says which command went where.

mod bench_cluster;
mod chaos;
mod print;
mod replica_demo;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// gpool-devtools: benchmarks that start real servers, the chaos suite, and test helpers for gpool's developers.
#[derive(Parser, Debug)]
#[command(name = "gpool-devtools", version, about, long_about = None)]
struct Cli {
    /// The `gpool` binary the tools start (default: `gpool` next to this
    /// binary, as cargo builds both into one directory, else on PATH).
    #[arg(long, global = true, env = "GPOOL_BIN", value_name = "PATH")]
    gpool: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Benchmarks that bring up real gpool servers.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// A small HTTP server on $PORT to try services with (answers after --delay; /health, /stream).
    ReplicaDemo(replica_demo::ReplicaDemoArgs),
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// The control plane at scale: simulated nodes speaking the agent protocol, a large queue.
    Cluster(bench_cluster::ClusterArgs),
    /// A real cluster under seeded random faults, checked from the jobs' own records.
    Chaos(chaos::ChaosArgs),
}

/// The `gpool` binary to run: `--gpool` (or `GPOOL_BIN`), else the one next
/// to this binary, else `gpool` on PATH.
fn gpool_exe(given: Option<PathBuf>) -> PathBuf {
    given
        .or_else(|| {
            let next = std::env::current_exe().ok()?.with_file_name("gpool");
            next.is_file().then_some(next)
        })
        .unwrap_or_else(|| PathBuf::from("gpool"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let gpool = gpool_exe(cli.gpool);
    let result = match cli.command {
        Command::Bench(BenchCommand::Cluster(a)) => bench_cluster::cluster(a, &gpool),
        Command::Bench(BenchCommand::Chaos(a)) => chaos::run(a, &gpool),
        Command::ReplicaDemo(a) => replica_demo::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        <Cli as clap::CommandFactory>::command().debug_assert();
    }

    #[test]
    fn the_gpool_binary_given_wins() {
        assert_eq!(gpool_exe(Some(PathBuf::from("/opt/gpool"))), PathBuf::from("/opt/gpool"));
    }
}
