//! `gpool`: one binary for the daemon, the CLI client, the simulator and the benchmarks.

/// `println!` that ends the program quietly when standard output is closed
/// (`gpool queue | head`) instead of panicking.
macro_rules! outln {
    ($($t:tt)*) => {{
        let mut out = std::io::stdout().lock();
        let line = format!($($t)*);
        if let Err(e) = std::io::Write::write_all(&mut out, line.as_bytes()).and_then(|()| std::io::Write::write_all(&mut out, b"\n")) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(0);
            }
        }
    }};
}

mod bench;
mod bench_cluster;
mod bench_daemon;
mod client;
mod daemons;
mod output;
mod progress;
mod sim;
mod top;
mod verbs;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::verbs::{advise, alerts, cancel, drain, events, logs, nodes, queue, queues, show, submit, token, whoami};

/// gpool: a GPU resource manager. Queue, schedule and observe jobs on shared GPUs.
#[derive(Parser, Debug)]
#[command(name = "gpool", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Start gpool on this machine: control plane, local agent and API in one process.
    Up(Box<daemons::UpArgs>),
    /// Run the control plane alone (state in SQLite or PostgreSQL), for `gpool agent`s on the nodes.
    Serve(Box<daemons::ServeArgs>),
    /// Run this machine as a node of a cluster: join a control plane and run its jobs.
    Agent(Box<daemons::AgentArgs>),
    /// Drain nodes: running jobs finish, nothing new starts there.
    Drain(drain::DrainArgs),
    /// Let drained nodes take new work again.
    Resume(drain::DrainArgs),
    /// Submit a job; prints its id.
    Submit(Box<submit::SubmitArgs>),
    /// List jobs (active ones by default), with why each pending job waits.
    #[command(alias = "ls")]
    Queue(queue::QueueArgs),
    /// Show jobs in detail.
    Show(verbs::IdArgs),
    /// Cancel jobs: the stop signal, then SIGKILL after the grace period.
    Cancel(verbs::IdArgs),
    /// Print a job's output; -f follows it until the job ends.
    Logs(logs::LogsArgs),
    /// Nodes and their devices.
    Nodes(verbs::ListArgs),
    /// Quota queues and their use.
    Queues(verbs::ListArgs),
    /// Follow what happens (submissions, starts, ends, preemptions).
    Events(events::EventsArgs),
    /// Who the token belongs to.
    Whoami(verbs::ListArgs),
    /// Diagnose a job from its GPU telemetry: bottlenecks, idle or oversized GPUs, and what the waste costs.
    Advise(advise::AdviseArgs),
    /// Alerts firing now (GPU health, idle or saturated GPUs, low utilisation).
    Alerts(alerts::AlertsArgs),
    /// A live view of GPUs, their jobs and the queue (like nvitop, over the API).
    Top(top::TopArgs),
    /// Manage API tokens.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Supervise one job replica (started by the agent, not by hand).
    #[command(hide = true)]
    Shim { dir: std::path::PathBuf },
    /// Measure gpool's performance.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Replay a job trace through gpool's scheduler and report JCT, queueing, utilisation.
    Sim(Box<sim::SimArgs>),
}

#[derive(Subcommand, Debug)]
enum TokenCommand {
    /// Create a token for a user (admins only); prints the secret once.
    Create(token::TokenArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Shim { dir } => return ExitCode::from(daemons::shim(&dir)),
        Command::Up(a) => daemons::up(*a),
        Command::Serve(a) => daemons::serve(*a),
        Command::Agent(a) => daemons::agent(*a),
        Command::Drain(a) => drain::run(a, true),
        Command::Resume(a) => drain::run(a, false),
        Command::Submit(a) => submit::run(*a),
        Command::Queue(a) => queue::run(a),
        Command::Show(a) => show::run(a),
        Command::Cancel(a) => cancel::run(a),
        Command::Logs(a) => logs::run(a),
        Command::Nodes(a) => nodes::run(a),
        Command::Queues(a) => queues::run(a),
        Command::Events(a) => events::run(a),
        Command::Whoami(a) => whoami::run(a),
        Command::Advise(a) => advise::run(a),
        Command::Alerts(a) => alerts::run(a),
        Command::Top(a) => top::run(a),
        Command::Token(TokenCommand::Create(a)) => token::create(a),
        Command::Bench(cmd) => bench::run(cmd),
        Command::Sim(args) => sim::run_sim(*args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
