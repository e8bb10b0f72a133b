//! `gpool reservation create|list|delete` (Slurm's `scontrol create
//! reservation`): GPUs set aside for users or teams over a window. Jobs run
//! in one with `gpool submit --reservation NAME`.

use anyhow::bail;
use gpool_api::reservation::{ReservationRequest, ReservationView};

use super::ListArgs;
use crate::client::Connect;
use crate::output::{emit, text, when};

/// `gpool reservation create NAME --gpus N --start T --duration D --team T`.
#[derive(clap::Args, Debug)]
pub(crate) struct CreateArgs {
    /// Its name, which jobs give as --reservation.
    name: String,
    /// Whole GPUs to set aside.
    #[arg(long)]
    gpus: u32,
    /// Only GPUs of this model (H100-80GB).
    #[arg(long)]
    model: Option<String>,
    /// Only on these nodes (comma-separated).
    #[arg(long, value_delimiter = ',')]
    nodes: Vec<String>,
    /// When it starts: now+40s, 2026-12-01T09:00 (your time zone: TZ, else the system's), or a time with its zone.
    #[arg(long)]
    start: String,
    /// How long it lasts: 8h, 90m, 1d.
    #[arg(long)]
    duration: String,
    /// Users whose jobs may run in it (comma-separated).
    #[arg(long, value_delimiter = ',')]
    users: Vec<String>,
    /// Teams whose jobs may run in it (comma-separated).
    #[arg(long, alias = "teams", value_delimiter = ',')]
    team: Vec<String>,
    #[arg(long, short = 'o', value_enum, default_value_t = crate::config_file::default_output())]
    output: crate::output::Output,
    #[command(flatten)]
    connect: Connect,
}

/// `gpool reservation delete NAME`.
#[derive(clap::Args, Debug)]
pub(crate) struct DeleteArgs {
    name: String,
    #[command(flatten)]
    connect: Connect,
}

pub(crate) fn create(a: CreateArgs) -> anyhow::Result<()> {
    if a.users.is_empty() && a.team.is_empty() {
        bail!("say who may run in it: --users ana,bob or --team vision (or both)");
    }
    let zone = jiff::tz::TimeZone::try_system().unwrap_or(jiff::tz::TimeZone::UTC);
    let start = super::submit::begin_time(&a.start, &zone, jiff::Timestamp::now())
        .map_err(|e| anyhow::anyhow!("--start {e}"))?;
    let req = ReservationRequest {
        name: a.name,
        gpus: a.gpus,
        model: a.model,
        nodes: a.nodes,
        start,
        duration: a.duration,
        users: a.users,
        teams: a.team,
    };
    let v: ReservationView = a.connect.client()?.post("/reservations", &req)?;
    if a.output.is_data() {
        emit(&a.output.data(&v)?);
    } else {
        emit(&format!(
            "reservation {}: {} GPU(s) ({}) from {} to {}; jobs run in it with --reservation {}\n",
            v.name,
            v.gpus,
            devices(&v),
            when(&v.start),
            when(&v.end),
            v.name
        ));
    }
    Ok(())
}

pub(crate) fn delete(a: DeleteArgs) -> anyhow::Result<()> {
    let v: ReservationView = a.connect.client()?.delete(&format!("/reservations/{}", a.name))?;
    emit(&format!("deleted reservation {}: its {} GPU(s) are anyone's\n", v.name, v.gpus));
    Ok(())
}

pub(crate) fn list(a: ListArgs) -> anyhow::Result<()> {
    let list: Vec<ReservationView> = a.connect.client()?.get("/reservations")?;
    emit(&render(&list, a.output)?);
    Ok(())
}

fn devices(v: &ReservationView) -> String {
    v.devices
        .iter()
        .map(|d| format!("{}:{}", d.node, d.gpus.iter().map(u32::to_string).collect::<Vec<_>>().join(",")))
        .collect::<Vec<_>>()
        .join(" ")
}

pub(crate) fn render(list: &[ReservationView], output: crate::output::Output) -> anyhow::Result<String> {
    if output.is_data() {
        return output.data(list);
    }
    if list.is_empty() {
        return Ok("no reservations: gpool reservation create NAME --gpus N --start T --duration D --team T\n".into());
    }
    let mut lines = vec![format!(
        "{:<16} {:<9} {:<20} {:<20} {:>4} {:>4}  {:<24} {}",
        "NAME", "STATE", "START", "END", "GPUS", "JOBS", "FOR", "DEVICES"
    )];
    for v in list {
        let who: Vec<String> = v.users.iter().cloned().chain(v.teams.iter().map(|t| format!("team {t}"))).collect();
        lines.push(format!(
            "{:<16} {:<9} {:<20} {:<20} {:>4} {:>4}  {:<24} {}",
            v.name,
            v.state,
            when(&v.start),
            when(&v.end),
            v.gpus,
            v.running_jobs,
            who.join(","),
            devices(v)
        ));
    }
    Ok(text(lines))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_list_their_window_gpus_and_who_may_use_them() {
        let v = ReservationView {
            name: "demo".into(),
            start: "2026-12-01T09:00:00Z".into(),
            end: "2026-12-01T17:00:00Z".into(),
            state: "upcoming".into(),
            gpus: 4,
            devices: vec![gpool_api::reservation::ReservedGpus { node: "gpu-a".into(), gpus: vec![4, 5, 6, 7] }],
            users: vec!["ana".into()],
            teams: vec!["vision".into()],
            running_jobs: 0,
            created_by: "admin".into(),
        };
        let out = render(&[v], crate::output::Output::Table).expect("render");
        assert!(out.contains("demo") && out.contains("upcoming") && out.contains("ana,team vision"), "{out}");
        assert!(out.contains("gpu-a:4,5,6,7"), "{out}");
        assert!(render(&[], crate::output::Output::Table).expect("empty").contains("gpool reservation create"));
    }
}
