//! `gpool`: one binary for the daemon, the CLI client, the simulator and the benchmarks.

mod bench;
mod progress;
mod sim;

use clap::{Parser, Subcommand};

/// gpool: a GPU resource manager. Queue, schedule and observe jobs on shared GPUs.
#[derive(Parser, Debug)]
#[command(name = "gpool", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Measure gpool's performance.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Replay a job trace through gpool's scheduler and report JCT, queueing, utilisation.
    Sim(Box<sim::SimArgs>),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(cmd) => bench::run(cmd),
        Command::Sim(args) => sim::run_sim(*args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
