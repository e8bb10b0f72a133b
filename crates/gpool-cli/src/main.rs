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
mod jobs;
mod output;
mod progress;
mod sim;
mod telemetry;
mod top;

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
    /// Start gpool on this machine: control plane, local agent and API in one process.
    Up(Box<daemons::UpArgs>),
    /// Run the control plane alone (state in SQLite or PostgreSQL), for `gpool agent`s on the nodes.
    Serve(Box<daemons::ServeArgs>),
    /// Run this machine as a node of a cluster: join a control plane and run its jobs.
    Agent(Box<daemons::AgentArgs>),
    /// Drain nodes: running jobs finish, nothing new starts there.
    Drain(daemons::DrainArgs),
    /// Let drained nodes take new work again.
    Resume(daemons::DrainArgs),
    /// Submit a job; prints its id.
    Submit(Box<jobs::SubmitArgs>),
    /// List jobs (active ones by default), with why each pending job waits.
    #[command(alias = "ls")]
    Queue(jobs::QueueArgs),
    /// Show jobs in detail.
    Show(jobs::IdArgs),
    /// Cancel jobs: the stop signal, then SIGKILL after the grace period.
    Cancel(jobs::IdArgs),
    /// Print a job's output; -f follows it until the job ends.
    Logs(jobs::LogsArgs),
    /// Nodes and their devices.
    Nodes(jobs::ListArgs),
    /// Quota queues and their use.
    Queues(jobs::ListArgs),
    /// Follow what happens (submissions, starts, ends, preemptions).
    Events(jobs::EventsArgs),
    /// Who the token belongs to.
    Whoami(jobs::ListArgs),
    /// Diagnose a job from its GPU telemetry: bottlenecks, idle or oversized GPUs, and what the waste costs.
    Advise(telemetry::AdviseArgs),
    /// Alerts firing now (GPU health, idle or saturated GPUs, low utilisation).
    Alerts(telemetry::AlertsArgs),
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
    Create(jobs::TokenArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Shim { dir } => return std::process::ExitCode::from(gpool_daemon::shim::main(&dir) as u8),
        Command::Up(a) => daemons::up(*a),
        Command::Serve(a) => daemons::serve(*a),
        Command::Agent(a) => daemons::agent(*a),
        Command::Drain(a) => daemons::drain(a, true),
        Command::Resume(a) => daemons::drain(a, false),
        Command::Submit(a) => jobs::submit(*a),
        Command::Queue(a) => jobs::queue(a),
        Command::Show(a) => jobs::show(a),
        Command::Cancel(a) => jobs::cancel(a),
        Command::Logs(a) => jobs::logs(a),
        Command::Nodes(a) => jobs::nodes(a),
        Command::Queues(a) => jobs::queues(a),
        Command::Events(a) => jobs::events(a),
        Command::Whoami(a) => jobs::whoami(a),
        Command::Advise(a) => telemetry::advise(a),
        Command::Alerts(a) => telemetry::alerts(a),
        Command::Top(a) => top::run(a),
        Command::Token(TokenCommand::Create(a)) => jobs::token_create(a),
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
