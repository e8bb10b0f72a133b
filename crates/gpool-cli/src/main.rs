//! `gpool`: one binary for the daemon, the CLI client, the simulator and the benchmarks.
//! What only gpool's developers run (the chaos suite, benchmarks that start
//! real servers, the replica demo) is the `gpool-devtools` binary (issue 37).

/// `println!` that ends the program quietly when standard output is closed
/// (`gpool queue | head`) instead of panicking.
macro_rules! outln {
    ($($t:tt)*) => {{
        let mut out = std::io::stdout().lock();
        let line = format!($($t)*);
        // Node- and user-supplied text must not drive the terminal (`output::shown`).
        let line = crate::output::shown(&line);
        if let Err(e) = std::io::Write::write_all(&mut out, line.as_bytes()).and_then(|()| std::io::Write::write_all(&mut out, b"\n")) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(0);
            }
        }
    }};
}

mod bench;
mod bench_acct;
mod bench_daemon;
mod bench_policies;
mod bench_sharing;
mod client;
mod config_file;
mod daemon_config;
mod daemons;
mod job_ref;
mod local_node;
mod logging;
mod output;
mod progress;
mod sbatch;
mod sim;
#[cfg(test)]
mod testkit;
mod top;
mod unix_socket;
mod verbs;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::client::{ClientError, ErrorKind};
use crate::verbs::{advise, alerts, cancel, drain, events, logs, nodes, queue, queues, show, submit, token, whoami};

/// Defines the exit codes once: the table README.md and docs/cli.md show
/// (a test checks that they do) and the text `gpool --help` ends with.
macro_rules! exit_codes {
    ($(($code:literal, $meaning:literal)),* $(,)?) => {
        /// (code, meaning) of each exit code (the docs' tables are checked against it).
        #[cfg(test)]
        const EXIT_TABLE: &[(u8, &str)] = &[$(($code, $meaning)),*];
        /// What `gpool --help` ends with.
        const EXIT_CODES: &str = concat!(
            "Exit codes:\n",
            $("  ", $code, "  ", $meaning, "\n",)*
            "With several job ids (show, cancel), the code of the failures when they are\n\
             all of one kind (3 if every failing id is not found), else 1.\n\
             submit --wait exits with the job's own status: its exit code, 128 + its\n\
             signal, or 1 (cancelled, timed out)."
        );
    };
}

exit_codes![
    (0, "success"),
    (1, "the command failed (any error not listed below, e.g. HTTP 400 or 409)"),
    (2, "usage error: unknown flag, bad or missing argument"),
    (3, "not found: no such job or node (HTTP 404; other users' jobs are not found either)"),
    (4, "permission denied, bad or missing token (HTTP 401, 403)"),
    (5, "daemon unreachable: connection refused, unknown host, timeout, or no local daemon found"),
];

/// Exit codes of failures (0 is success; 2, a usage error, is clap's own).
const EXIT_FAILED: u8 = 1;
const EXIT_NOT_FOUND: u8 = 3;
const EXIT_DENIED: u8 = 4;
const EXIT_UNREACHABLE: u8 = 5;

/// The exit code of a command that failed with `e`.
fn exit_code(e: &anyhow::Error) -> u8 {
    if let Some(s) = e.downcast_ref::<verbs::wait::JobStatus>() {
        return s.code;
    }
    match ClientError::kind_of(e) {
        ErrorKind::NotFound => EXIT_NOT_FOUND,
        ErrorKind::Denied => EXIT_DENIED,
        ErrorKind::Unreachable => EXIT_UNREACHABLE,
        ErrorKind::Failed => EXIT_FAILED,
    }
}

/// gpool: a GPU resource manager. Queue, schedule and observe jobs on shared GPUs.
#[derive(Parser, Debug)]
#[command(name = "gpool", version, about, long_about = None, after_help = EXIT_CODES)]
struct Cli {
    /// Show times in UTC instead of the local time zone (TZ, else the system's).
    #[arg(long, global = true)]
    utc: bool,
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
    /// Submit a job and print its output as it runs, waiting for resources first; exits with its status (srun).
    Run(Box<submit::RunArgs>),
    /// Pipelines: stages that need each other, fan out over a matrix and pass files on (run, status, list, cancel).
    #[command(subcommand)]
    Pipeline(PipelineCommand),
    /// Power budgets: watts, what the scheduler counts, what the GPUs drew, jobs held back; `gpool power set` (admins).
    Power(PowerArgs),
    /// Recurring jobs and pipelines on a cron schedule in a stated time zone (apply, list, delete).
    #[command(subcommand)]
    Schedule(ScheduleCommand),
    /// List jobs (active ones by default), with why each pending job waits.
    #[command(alias = "ls")]
    Queue(queue::QueueArgs),
    /// Show jobs in detail.
    Show(verbs::IdArgs),
    /// Cancel jobs, by id or every one that matches -u/--state: the stop signal, then SIGKILL after the grace period.
    Cancel(verbs::cancel::CancelArgs),
    /// Hold pending jobs back: no pass starts them until they are released (scontrol hold).
    Hold(verbs::hold::HoldArgs),
    /// Release held jobs: they wait for a pass again (scontrol release).
    Release(verbs::hold::HoldArgs),
    /// Print a job's output; -f follows it until the job ends.
    Logs(logs::LogsArgs),
    /// Join the terminal of an interactive job (gpool run --pty); `~.` detaches.
    Attach(verbs::attach::AttachArgs),
    /// Nodes and their devices; `gpool nodes notice NODE --in 2m` gives one a spot notice.
    Nodes(NodesArgs),
    /// Quota queues and their use.
    Queues(verbs::ListArgs),
    /// What jobs cost, by team, user, queue, pool or job, over a period (-o table, json or csv).
    Cost(verbs::cost::CostArgs),
    /// Jobs that ended in a period, and those running, with Slurm-like fields (sacct; -o table, json or csv).
    #[command(alias = "sacct")]
    Acct(verbs::acct::AcctArgs),
    /// Monthly budgets per team or queue: this month's spend, the share used, jobs held back.
    Budgets(verbs::ListArgs),
    /// Elastic node pools: shape, price, limits, nodes being created, idle or deleted, and health.
    Pools(verbs::ListArgs),
    /// Inference services: endpoint, ready and desired replicas, requests/s, p50/p99; `gpool services delete NAME`.
    Services(ServicesArgs),
    /// Follow what happens (submissions, starts, ends, preemptions).
    Events(events::EventsArgs),
    /// Who the token belongs to.
    Whoami(verbs::ListArgs),
    /// Is each control plane up, and which leads (`scontrol ping`); needs no token, exits 0 when all answer.
    Ping(verbs::ping::PingArgs),
    /// Diagnose a job from its GPU telemetry: bottlenecks, idle or oversized GPUs, and what the waste costs.
    Advise(advise::AdviseArgs),
    /// Profile a running job for a few seconds: its Python stacks (py-spy) and accelerators, the bottleneck and the fix.
    Profile(verbs::profile::ProfileArgs),
    /// Alerts firing now (GPU health, idle or saturated GPUs, low utilisation).
    Alerts(alerts::AlertsArgs),
    /// A live view of GPUs, their jobs and the queue (like nvitop, over the API).
    Top(top::TopArgs),
    /// GPUs out of service for faults: why, since when, what was done, GPU-hours lost.
    Health(verbs::health::HealthArgs),
    /// Manage API tokens.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Back up and restore the daemon's state (gpool admin backup FILE; restore FILE).
    #[command(subcommand)]
    Admin(verbs::admin::AdminCommand),
    /// Your logins to image registries, used only for your jobs' images (login, list, logout).
    #[command(subcommand)]
    Registry(RegistryCommand),
    /// Advance reservations: GPUs set aside for users or teams over a window (scontrol create reservation).
    #[command(subcommand)]
    Reservation(ReservationCommand),
    /// Supervise one job replica (started by the agent, not by hand).
    #[command(hide = true)]
    Shim { dir: std::path::PathBuf },
    /// The `local` provider of node pools (run by the control plane, not by hand).
    #[command(subcommand, hide = true)]
    LocalNode(local_node::LocalNodeCommand),
    /// Measure gpool's performance.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Replay a job trace through gpool's scheduler and report JCT, queueing, utilisation.
    Sim(Box<sim::SimArgs>),
    /// Print a shell completion script: `source <(gpool completion bash)`, or save it where your shell looks.
    Completion {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Write the man pages (gpool.1, and gpool-VERB.1 for each verb) into DIR: what packages install.
    Man {
        /// The directory to write them in (made if missing).
        dir: std::path::PathBuf,
    },
}

#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
struct NodesArgs {
    #[command(subcommand)]
    command: Option<NodesCommand>,
    #[command(flatten)]
    list: verbs::ListArgs,
}

#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
struct ServicesArgs {
    #[command(subcommand)]
    command: Option<ServicesCommand>,
    #[command(flatten)]
    list: verbs::ListArgs,
}

#[derive(Subcommand, Debug)]
enum ServicesCommand {
    /// Delete a service: its replicas stop, and the proxy answers 404 for it.
    Delete(verbs::services::DeleteArgs),
}

#[derive(Subcommand, Debug)]
enum NodesCommand {
    /// A spot notice: the provider takes NODE back soon; its jobs checkpoint within the notice and are requeued (admins, or the node's token).
    Notice(drain::NoticeArgs),
    /// Show a fault on a simulated GPU (admins): gpool acts on it as on a real one (docs/health.md).
    Inject(verbs::health::InjectArgs),
    /// Bring a quarantined GPU back into service (admins).
    Restore(verbs::health::RestoreArgs),
}

#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
struct PowerArgs {
    #[command(subcommand)]
    command: Option<PowerCommand>,
    #[command(flatten)]
    list: verbs::ListArgs,
}

#[derive(Subcommand, Debug)]
enum PowerCommand {
    /// Set a budget live: gpool power set --node NODE 1900W (or --label rack=r12, --pool P).
    Set(verbs::power::SetArgs),
}

#[derive(Subcommand, Debug)]
enum PipelineCommand {
    /// Start a run of a pipeline file; prints the run's id.
    Run(verbs::pipeline::RunArgs),
    /// A run's stages as a tree: each one's job, state and why it waits or how it ended.
    Status(verbs::pipeline::RunIdArgs),
    /// The latest runs: name, state, stages done.
    List(verbs::pipeline::ListArgs),
    /// Cancel every job of a run that has not ended.
    Cancel(verbs::pipeline::RunIdArgs),
}

#[derive(Subcommand, Debug)]
enum ScheduleCommand {
    /// Create or change a schedule: --cron "0 2 * * *" --tz Europe/Paris with --job FILE or --pipeline FILE, or -f FILE.
    Apply(Box<verbs::schedule::ApplyArgs>),
    /// Every schedule: cron, zone, next run, runs and passed occurrences.
    List(verbs::ListArgs),
    /// Delete a schedule; what it submitted goes on.
    Delete(verbs::schedule::DeleteArgs),
}

#[derive(Subcommand, Debug)]
enum RegistryCommand {
    /// Store a login: echo "$TOKEN" | gpool registry login ghcr.io -u me --password-stdin.
    Login(verbs::registry::LoginArgs),
    /// Your logins: registry and user name (never the password).
    List(verbs::ListArgs),
    /// Forget your login to a registry.
    Logout(verbs::registry::LogoutArgs),
}

#[derive(Subcommand, Debug)]
enum ReservationCommand {
    /// Set GPUs aside (admins): gpool reservation create demo --gpus 4 --start now+1h --duration 8h --team vision.
    Create(verbs::reservation::CreateArgs),
    /// The reservations: window, GPUs, who may use them, their running jobs.
    List(verbs::ListArgs),
    /// Delete a reservation (admins): its GPUs are anyone's at once.
    Delete(verbs::reservation::DeleteArgs),
}

#[derive(Subcommand, Debug)]
enum TokenCommand {
    /// Create a token for a user (admins only); prints the secret once.
    Create(token::TokenArgs),
    /// Tokens (every one for admins, your own otherwise): id, user, role, expiry, last use; never secrets.
    List(verbs::ListArgs),
    /// Revoke a token: its next request is refused (admins: any token; others: their own).
    Revoke(token::RevokeArgs),
}

fn main() -> ExitCode {
    // A job's shim, as the agent starts it (`gpool shim DIR`): one per job
    // start, so it skips building the whole command line's parser and
    // looking up the time zone (half its own cost: issue 44).
    if let [_, sub, dir] = std::env::args_os().collect::<Vec<_>>().as_slice()
        && sub == "shim"
        && !dir.as_encoded_bytes().starts_with(b"-")
    {
        return ExitCode::from(daemons::shim(std::path::Path::new(dir)));
    }
    let argv = match daemon_config::expand(&<Cli as clap::CommandFactory>::command(), std::env::args_os().collect()) {
        Ok(argv) => argv,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    let cli = Cli::parse_from(argv);
    output::use_zone(cli.utc);
    let result = match cli.command {
        Command::Shim { dir } => return ExitCode::from(daemons::shim(&dir)),
        Command::Up(a) => daemons::up(*a),
        Command::Serve(a) => daemons::serve(*a),
        Command::Agent(a) => daemons::agent(*a),
        Command::Drain(a) => drain::run(a, true),
        Command::Resume(a) => drain::run(a, false),
        Command::Submit(a) => submit::run(*a),
        Command::Run(a) => submit::run_attached(*a),
        Command::Pipeline(PipelineCommand::Run(a)) => verbs::pipeline::run(a),
        Command::Pipeline(PipelineCommand::Status(a)) => verbs::pipeline::status(a),
        Command::Pipeline(PipelineCommand::List(a)) => verbs::pipeline::list(a),
        Command::Pipeline(PipelineCommand::Cancel(a)) => verbs::pipeline::cancel(a),
        Command::Power(PowerArgs { command: Some(PowerCommand::Set(a)), .. }) => verbs::power::set(a),
        Command::Power(PowerArgs { command: None, list }) => verbs::power::run(list),
        Command::Schedule(ScheduleCommand::Apply(a)) => verbs::schedule::apply(*a),
        Command::Schedule(ScheduleCommand::List(a)) => verbs::schedule::list(a),
        Command::Schedule(ScheduleCommand::Delete(a)) => verbs::schedule::delete(a),
        Command::Queue(a) => queue::run(a),
        Command::Show(a) => show::run(a),
        Command::Cancel(a) => cancel::run(a),
        Command::Hold(a) => verbs::hold::run(a, true),
        Command::Release(a) => verbs::hold::run(a, false),
        Command::Logs(a) => logs::run(a),
        Command::Attach(a) => verbs::attach::run(a),
        Command::Nodes(NodesArgs { command: Some(NodesCommand::Notice(a)), .. }) => drain::notice(a),
        Command::Nodes(NodesArgs { command: Some(NodesCommand::Inject(a)), .. }) => verbs::health::inject(a),
        Command::Nodes(NodesArgs { command: Some(NodesCommand::Restore(a)), .. }) => verbs::health::restore(a),
        Command::Nodes(NodesArgs { command: None, list }) => nodes::run(list),
        Command::Queues(a) => queues::run(a),
        Command::Pools(a) => verbs::pools::run(a),
        Command::Services(ServicesArgs { command: Some(ServicesCommand::Delete(a)), .. }) => verbs::services::delete(a),
        Command::Services(ServicesArgs { command: None, list }) => verbs::services::run(list),
        Command::Cost(a) => verbs::cost::run(a),
        Command::Acct(a) => verbs::acct::run(a),
        Command::Budgets(a) => verbs::budgets::run(a),
        Command::LocalNode(c) => local_node::run(c),
        Command::Events(a) => events::run(a),
        Command::Whoami(a) => whoami::run(a),
        Command::Ping(a) => verbs::ping::run(a),
        Command::Advise(a) => advise::run(a),
        Command::Profile(a) => verbs::profile::run(a),
        Command::Alerts(a) => alerts::run(a),
        Command::Top(a) => top::run(a),
        Command::Health(a) => verbs::health::run(a),
        Command::Reservation(ReservationCommand::Create(a)) => verbs::reservation::create(a),
        Command::Reservation(ReservationCommand::List(a)) => verbs::reservation::list(a),
        Command::Reservation(ReservationCommand::Delete(a)) => verbs::reservation::delete(a),
        Command::Registry(RegistryCommand::Login(a)) => verbs::registry::login(a),
        Command::Registry(RegistryCommand::List(a)) => verbs::registry::list(a),
        Command::Registry(RegistryCommand::Logout(a)) => verbs::registry::logout(a),
        Command::Admin(c) => verbs::admin::run(c),
        Command::Token(TokenCommand::Create(a)) => token::create(a),
        Command::Token(TokenCommand::List(a)) => token::list(a),
        Command::Token(TokenCommand::Revoke(a)) => token::revoke(a),
        Command::Bench(cmd) => bench::run(cmd),
        Command::Sim(args) => sim::run_sim(*args),
        Command::Completion { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cmd, "gpool", &mut script);
            output::emit(&String::from_utf8_lossy(&script));
            Ok(())
        }
        Command::Man { dir } => man_pages(&dir),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(exit_code(&e))
        }
    }
}

/// The man pages, from the same definitions as `--help` (clap_mangen).
fn man_pages(dir: &std::path::Path) -> anyhow::Result<()> {
    use anyhow::Context as _;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot make {}", dir.display()))?;
    let cmd = <Cli as clap::CommandFactory>::command().version(env!("CARGO_PKG_VERSION"));
    clap_mangen::generate_to(cmd, dir).with_context(|| format!("cannot write the man pages in {}", dir.display()))?;
    println!("man pages in {}", dir.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    /// Every shell's script names the verbs, flags and the values of enums.
    #[test]
    fn completion_scripts_know_the_verbs_and_their_flags() {
        for shell in [clap_complete::Shell::Bash, clap_complete::Shell::Zsh, clap_complete::Shell::Fish] {
            let mut cmd = <super::Cli as clap::CommandFactory>::command();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cmd, "gpool", &mut script);
            let text = String::from_utf8(script).expect("utf-8");
            for word in ["submit", "cancel", "gpu-fraction", "gpu-sharing", "completion"] {
                assert!(text.contains(word), "{shell}: no {word}");
            }
        }
    }

    use anyhow::Context;
    use clap::CommandFactory;

    use super::*;

    fn failing(kind: ErrorKind) -> anyhow::Error {
        ClientError::new(kind, "x").into()
    }

    #[test]
    fn each_kind_of_failure_has_its_exit_code() {
        assert_eq!(exit_code(&failing(ErrorKind::NotFound)), 3);
        assert_eq!(exit_code(&failing(ErrorKind::Denied)), 4);
        assert_eq!(exit_code(&failing(ErrorKind::Unreachable)), 5);
        assert_eq!(exit_code(&failing(ErrorKind::Failed)), 1);
        assert_eq!(exit_code(&anyhow::anyhow!("anything else")), 1);
        // Context added on the way up keeps the kind.
        let wrapped = Err::<(), _>(failing(ErrorKind::NotFound)).context("job 7").expect_err("an error");
        assert_eq!(exit_code(&wrapped), 3);
        let io = std::fs::read("/nonexistent/url")
            .with_context(|| ClientError::new(ErrorKind::Unreachable, "no gpool daemon found"))
            .expect_err("no such file");
        assert_eq!(exit_code(&io), 5);
        assert_eq!(format!("{io:#}"), "no gpool daemon found: No such file or directory (os error 2)");
    }

    /// Issue 37: the table is written once; README.md and docs/cli.md show it as it is.
    #[test]
    fn readme_and_the_cli_doc_show_the_exit_codes_as_the_code_defines_them() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        for doc in ["README.md", "docs/cli.md"] {
            let text = std::fs::read_to_string(root.join(doc)).expect(doc);
            let section = text.split("## Exit codes").nth(1).unwrap_or_default();
            let rows: Vec<&str> = section
                .lines()
                .skip_while(|l| !l.starts_with('|'))
                .take_while(|l| l.starts_with('|'))
                .skip(2)
                .collect();
            let want: Vec<String> = EXIT_TABLE.iter().map(|(c, m)| format!("| {c} | {m} |")).collect();
            assert_eq!(rows, want, "{doc}'s exit-code table differs from the code's (main.rs, exit_codes!)");
        }
        assert_eq!(
            EXIT_TABLE.iter().map(|(c, _)| *c).collect::<Vec<_>>(),
            [0, EXIT_FAILED, 2, EXIT_NOT_FOUND, EXIT_DENIED, EXIT_UNREACHABLE]
        );
    }

    #[test]
    fn the_help_lists_the_exit_codes() {
        Cli::command().debug_assert();
        let help = Cli::command().render_help().to_string();
        for line in ["Exit codes:", "  3  not found", "  4  permission denied", "  5  daemon unreachable"] {
            assert!(help.contains(line), "{line:?} missing from:\n{help}");
        }
    }
}
