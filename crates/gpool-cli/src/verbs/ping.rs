//! `gpool ping`: is each control plane up, and does it lead? (Slurm's
//! `scontrol ping`.) It asks `/healthz`, which needs no token, so it serves
//! as a container's or a load balancer's health check: the exit status is 0
//! when every control plane named answers, leading or standing by.

use std::time::Duration;

use clap::Args;
use serde::Serialize;

use crate::client::{ClientError, Connect, ErrorKind, Probe};
use crate::output::{Output, emit};

/// Arguments of `gpool ping`.
#[derive(Args, Debug)]
pub(crate) struct PingArgs {
    /// How long to wait for each control plane's answer (e.g. 3s, 500ms).
    #[arg(long, default_value = "5s", value_parser = crate::daemons::parse_duration_arg)]
    timeout: Duration,
    #[arg(long, short = 'o', value_enum, default_value_t = crate::config_file::default_output())]
    output: Output,
    #[command(flatten)]
    connect: Connect,
}

/// One control plane's state, as printed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Pinged {
    /// Its URL, or the local daemon's socket.
    pub(crate) at: String,
    /// `up` (it leads), `standby`, `no-database` (it led and lost its database), or `down`.
    pub(crate) state: &'static str,
    /// What it answered, or why it did not.
    pub(crate) detail: String,
}

impl Pinged {
    fn answers(&self) -> bool {
        self.state != "down"
    }
}

pub(crate) fn run(a: PingArgs) -> anyhow::Result<()> {
    let client = a.connect.anonymous_client()?;
    let pinged: Vec<Pinged> =
        client.probe_each("/healthz", a.timeout).into_iter().map(|(at, probe)| classify(at, probe)).collect();
    emit(&render(&pinged, a.output)?);
    let down: Vec<&str> = pinged.iter().filter(|p| !p.answers()).map(|p| p.at.as_str()).collect();
    anyhow::ensure!(
        down.is_empty(),
        ClientError::new(ErrorKind::Unreachable, format!("no answer from {}", down.join(", ")))
    );
    Ok(())
}

/// What an answer to `/healthz` says of a control plane.
pub(crate) fn classify(at: String, probe: Result<Probe, String>) -> Pinged {
    let first_line = |s: &str| s.lines().next().unwrap_or("").trim().to_string();
    let (state, detail) = match probe {
        Ok(p) if p.status == 200 && p.store_away => ("no-database", "answers from memory: its database is away".into()),
        Ok(p) if p.status == 200 => ("up", "leads".into()),
        // One that led and lost its database answers as a standby does, and says why.
        Ok(p) if p.store_away => ("no-database", first_line(&p.said)),
        Ok(p) if p.standby => ("standby", "another control plane leads, or none yet".into()),
        Ok(p) => ("down", format!("HTTP {}: {}", p.status, first_line(&p.said))),
        Err(why) => ("down", why),
    };
    Pinged { at, state, detail }
}

/// `http://cp1:7878  up       leads`.
pub(crate) fn render(pinged: &[Pinged], output: Output) -> anyhow::Result<String> {
    if output.is_data() {
        return output.data(pinged);
    }
    let width = pinged.iter().map(|p| p.at.chars().count()).max().unwrap_or(0);
    Ok(pinged.iter().map(|p| format!("{:width$}  {:11}  {}\n", p.at, p.state, p.detail)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::assert_snapshot;

    fn probe(status: u16, standby: bool, store_away: bool, said: &str) -> Result<Probe, String> {
        Ok(Probe { status, standby, store_away, said: said.into() })
    }

    #[test]
    fn each_answer_names_a_state_and_only_silence_is_down() {
        let rows = [
            ("http://cp1:7878", probe(200, false, false, "ok\n"), "up"),
            ("http://cp2:7878", probe(503, true, false, "{\"error\":\"standby\"}"), "standby"),
            ("http://cp3:7878", probe(503, true, true, "database away\n"), "no-database"),
            ("http://cp4:7878", probe(200, false, true, "ok\n"), "no-database"),
            ("http://cp5:7878", probe(500, false, false, "boom\nmore"), "down"),
            ("http://cp6:7878", Err("connection refused".to_string()), "down"),
        ];
        let pinged: Vec<Pinged> = rows.iter().map(|(at, p, _)| classify(at.to_string(), p.clone())).collect();
        for (p, (_, _, want)) in pinged.iter().zip(&rows) {
            assert_eq!(p.state, *want, "{p:?}");
        }
        assert_eq!(pinged.iter().filter(|p| p.answers()).count(), 4);
        assert_eq!(pinged[4].detail, "HTTP 500: boom");
        assert_snapshot("ping.txt", &render(&pinged, Output::Table).unwrap());
        assert_snapshot("ping.json", &render(&pinged, Output::Json).unwrap());
    }
}
