//! `gpool top`: GPUs with utilisation and memory bars and sparklines, the
//! jobs on them, and the queue, refreshed over the API (so it works against
//! a remote daemon). In the spirit of nvitop. `--once` prints one frame as
//! text, for scripts and tests.

use std::time::Duration;

use clap::Args;
use gpool_api as api;
use ratatui::Terminal;
use ratatui::backend::{Backend, TestBackend};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table};

use crate::client::{Client, Connect};
use crate::output::sparkline;

#[derive(Args, Debug)]
pub(crate) struct TopArgs {
    /// Refresh interval.
    #[arg(long, default_value = "2s")]
    interval: String,
    /// Print one frame and exit (no terminal needed).
    #[arg(long)]
    once: bool,
    /// Width of the `--once` frame (default: 120).
    #[arg(long, default_value_t = 120)]
    width: u16,
    /// Height of the `--once` frame (default: 40).
    #[arg(long, default_value_t = 40)]
    height: u16,
    #[command(flatten)]
    connect: Connect,
}

/// What one frame shows.
struct Frame {
    nodes: Vec<api::NodeView>,
    jobs: Vec<api::JobView>,
    /// Why there is nothing to show (kept whole: its kind is the exit code of `--once`).
    error: Option<anyhow::Error>,
}

fn fetch(client: &Client) -> Frame {
    let nodes = client.get::<Vec<api::NodeView>>("/nodes");
    let jobs = client.get::<api::JobList>("/jobs?state=active&limit=1000");
    match (nodes, jobs) {
        (Ok(nodes), Ok(jobs)) => Frame { nodes, jobs: jobs.jobs, error: None },
        (Err(e), _) | (_, Err(e)) => Frame { nodes: Vec::new(), jobs: Vec::new(), error: Some(e) },
    }
}

fn bar(pct: Option<f64>, width: usize) -> Span<'static> {
    let Some(p) = pct else { return Span::raw(format!("{:<width$}", "n/a")) };
    let filled = ((p.clamp(0.0, 100.0) / 100.0) * width as f64).round() as usize;
    let color = if p >= 80.0 {
        Color::Green
    } else if p >= 30.0 {
        Color::Yellow
    } else {
        Color::Red
    };
    Span::styled(format!("{}{}", "█".repeat(filled), "·".repeat(width - filled)), Style::default().fg(color))
}

fn runtime(j: &api::JobView, now_ms: i64) -> String {
    let Some(start) = j.started_at.as_deref().and_then(api::time::parse_rfc3339) else { return "-".into() };
    let s = ((now_ms - start).max(0) / 1000) as u64;
    format!("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60)
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// The smallest window `gpool top` draws its panes in: a line of title and
/// the least rows of its three panes (4 + 4 + 4).
const MIN_WIDTH: u16 = 60;
const MIN_HEIGHT: u16 = 13;

fn draw(f: &mut ratatui::Frame<'_>, frame: &Frame, server: &str) {
    let area = f.area();
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        let say = format!("gpool top: window {}x{}, needs {MIN_WIDTH}x{MIN_HEIGHT}", area.width, area.height);
        f.render_widget(Paragraph::new(say).wrap(ratatui::widgets::Wrap { trim: true }), area);
        return;
    }
    let gpu_rows: usize =
        frame.nodes.iter().map(|n| n.devices.len() + n.devices.iter().map(|d| d.mig.len()).sum::<usize>()).sum();
    let running: Vec<&api::JobView> = frame.jobs.iter().filter(|j| j.state != api::JobState::Pending).collect();
    let pending: Vec<&api::JobView> = frame.jobs.iter().filter(|j| j.state == api::JobState::Pending).collect();
    let [head, gpus, jobs, queue] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length((gpu_rows as u16).saturating_add(3).min(area.height / 2).max(4)),
        Constraint::Min(4),
        Constraint::Length((pending.len() as u16).saturating_add(3).clamp(3, 10)),
    ])
    .areas(area);
    let total: usize = frame.nodes.iter().map(|n| n.devices.len()).sum();
    let busy: usize = frame.nodes.iter().flat_map(|n| &n.devices).filter(|d| d.job.is_some()).count();
    let title = match &frame.error {
        Some(e) => Line::from(Span::styled(format!("gpool top — {server} — {e:#}"), Style::default().fg(Color::Red))),
        None => Line::from(vec![
            Span::styled("gpool top", Style::default().add_modifier(Modifier::BOLD)),
            Span::raw(format!(
                " — {server} — {} node(s), {busy}/{total} GPUs allocated, {} running, {} pending — q quits",
                frame.nodes.len(),
                running.len(),
                pending.len()
            )),
        ]),
    };
    f.render_widget(Paragraph::new(title), head);

    // GPUs.
    let mut rows = Vec::new();
    for n in &frame.nodes {
        for d in &n.devices {
            let t = d.telemetry.as_ref();
            let mem_pct =
                t.and_then(|t| Some(t.memory_used_mb? as f64 / t.memory_total_mb.filter(|m| *m > 0)? as f64 * 100.0));
            let hist: Vec<f64> = t.map(|t| t.util_history.iter().map(|v| f64::from(*v)).collect()).unwrap_or_default();
            let holder = d.job.and_then(|id| frame.jobs.iter().find(|j| j.id == id));
            rows.push(Row::new(vec![
                Cell::from(format!("{}/{}", n.name, d.index)),
                Cell::from(d.model.clone()),
                Cell::from(Line::from(vec![
                    bar(t.and_then(|t| t.gpu_util), 10),
                    Span::raw(format!(
                        " {:>4}",
                        t.and_then(|t| t.gpu_util).map_or_else(|| "-".into(), |u| format!("{u:.0}%"))
                    )),
                ])),
                Cell::from(Line::from(vec![
                    bar(mem_pct, 10),
                    Span::raw(format!(
                        " {:>5}",
                        t.and_then(|t| t.memory_used_mb)
                            .map_or_else(|| "-".into(), |m| format!("{:.0}G", m as f64 / 1024.0))
                    )),
                ])),
                Cell::from(t.and_then(|t| t.temperature_c).map_or_else(|| "-".into(), |c| format!("{c:.0}C"))),
                Cell::from(t.and_then(|t| t.power_w).map_or_else(|| "-".into(), |p| format!("{p:.0}W"))),
                Cell::from(sparkline(&hist, 20)),
                Cell::from(match (d.mig.is_empty(), holder) {
                    (false, _) => "MIG".to_string(),
                    (true, Some(j)) => format!("job {} {}", j.id, j.user),
                    (true, None) => d.job.map_or_else(|| "free".into(), |id| format!("job {id}")),
                }),
            ]));
            for (i, m) in d.mig.iter().enumerate() {
                // By GPU-instance id; by position where the agent could not read ids.
                let name = m.gi_id.map_or_else(|| format!("  mig#{i}"), |gi| format!("  mig{gi}"));
                rows.push(Row::new(vec![
                    Cell::from(name),
                    Cell::from(m.profile.clone()),
                    Cell::from(""),
                    Cell::from(m.memory_used_mb.map_or_else(
                        || "-".into(),
                        |u| format!("{:.1}/{:.0}G", u as f64 / 1024.0, m.memory_mb as f64 / 1024.0),
                    )),
                    Cell::from(""),
                    Cell::from(""),
                    Cell::from(""),
                    Cell::from(m.job.map_or_else(|| "free".into(), |id| format!("job {id}"))),
                ]));
            }
        }
    }
    let widths = [
        Constraint::Length(14),
        Constraint::Length(12),
        Constraint::Length(16),
        Constraint::Length(17),
        Constraint::Length(5),
        Constraint::Length(6),
        Constraint::Length(21),
        Constraint::Min(10),
    ];
    let header = Row::new(["GPU", "MODEL", "UTIL", "MEMORY", "TEMP", "POWER", "HISTORY", "JOB"])
        .style(Style::default().add_modifier(Modifier::BOLD));
    f.render_widget(
        Table::new(rows, widths).header(header).block(Block::default().borders(Borders::TOP).title(" GPUs ")),
        gpus,
    );

    // Running jobs.
    let now = now_ms();
    let job_rows: Vec<Row> = running
        .iter()
        .map(|j| {
            let devices: Vec<String> =
                j.replicas.iter().map(|r| format!("{}:{}", r.node, r.cuda_visible_devices)).collect();
            let util =
                j.usage.as_ref().and_then(|u| u.mean_gpu_util).map_or_else(|| "-".into(), |u| format!("{u:.0}%"));
            let mem = j
                .usage
                .as_ref()
                .and_then(|u| u.peak_memory_mb)
                .map_or_else(|| "-".into(), |m| format!("{:.1}G", m as f64 / 1024.0));
            Row::new(vec![
                Cell::from(j.id.to_string()),
                Cell::from(j.user.clone()),
                Cell::from(j.name.clone()),
                Cell::from(j.state.as_str()),
                Cell::from(runtime(j, now)),
                Cell::from(util),
                Cell::from(mem),
                Cell::from(devices.join(" ")),
            ])
        })
        .collect();
    let widths = [
        Constraint::Length(7),
        Constraint::Length(10),
        Constraint::Length(16),
        Constraint::Length(9),
        Constraint::Length(9),
        Constraint::Length(6),
        Constraint::Length(8),
        Constraint::Min(10),
    ];
    let header = Row::new(["JOB", "USER", "NAME", "STATE", "RUNTIME", "UTIL", "PEAKMEM", "DEVICES"])
        .style(Style::default().add_modifier(Modifier::BOLD));
    f.render_widget(
        Table::new(job_rows, widths).header(header).block(Block::default().borders(Borders::TOP).title(" Running ")),
        jobs,
    );

    // The queue.
    let lines: Vec<Line> = pending
        .iter()
        .take(queue.height.saturating_sub(1) as usize)
        .map(|j| {
            Line::from(format!("{:>6}  {:<10} {:<16} {}", j.id, j.user, j.name, j.reason.clone().unwrap_or_default()))
        })
        .collect();
    f.render_widget(Paragraph::new(lines).block(Block::default().borders(Borders::TOP).title(" Pending ")), queue);
}

/// The text of a test backend's buffer, one line per row, trailing blanks trimmed.
fn buffer_text(b: &TestBackend) -> String {
    let buf = b.buffer();
    let area: Rect = buf.area;
    let mut out = String::new();
    for y in 0..area.height {
        let mut line = String::new();
        for x in 0..area.width {
            line.push_str(buf[(x, y)].symbol());
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

pub(crate) fn run(a: TopArgs) -> anyhow::Result<()> {
    let interval = gpool_api::quantity::parse_duration(&a.interval).map_err(|e| anyhow::anyhow!("--interval: {e}"))?;
    let interval = interval.max(Duration::from_millis(200));
    let client = a.connect.client()?;
    let server = client.place().to_string();
    if a.once {
        let mut term = Terminal::new(TestBackend::new(a.width.max(1), a.height.max(1)))?;
        let frame = fetch(&client);
        term.draw(|f| draw(f, &frame, &server))?;
        let text = buffer_text(term.backend());
        outln!("{}", text.trim_end());
        return match frame.error {
            Some(e) => Err(e),
            None => Ok(()),
        };
    }
    // SIGTERM (kill, systemd) and SIGHUP (the terminal closed) end the loop,
    // so that the terminal is restored (raw mode off, main screen back);
    // Ctrl-C arrives as a key in raw mode.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP] {
        signal_hook::flag::register(sig, stop.clone())?;
    }
    let mut term = ratatui::init();
    let result = interactive(&mut term, &client, &server, interval, &stop);
    ratatui::restore();
    result
}

fn interactive<B: Backend>(
    term: &mut Terminal<B>,
    client: &Client,
    server: &str,
    interval: Duration,
    stop: &std::sync::atomic::AtomicBool,
) -> anyhow::Result<()> {
    use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
    // How soon a signal is noticed while waiting for a key.
    const SIGNAL_CHECK: Duration = Duration::from_millis(100);
    let stopped = || stop.load(std::sync::atomic::Ordering::Relaxed);
    while !stopped() {
        let frame = fetch(client);
        term.draw(|f| draw(f, &frame, server)).map_err(|e| anyhow::anyhow!("drawing the screen: {e}"))?;
        // Wait for a key, a signal or the next refresh, whichever comes first.
        let next = std::time::Instant::now() + interval;
        while !stopped() {
            let left = next.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            if !event::poll(left.min(SIGNAL_CHECK))? {
                continue;
            }
            match event::read()? {
                Event::Key(k) if k.kind == KeyEventKind::Press => {
                    let ctrl_c = k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
                    if matches!(k.code, KeyCode::Char('q') | KeyCode::Esc) || ctrl_c {
                        return Ok(());
                    }
                }
                // Redraw at the new size at once.
                Event::Resize(..) => break,
                _ => {}
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{gpu, job, node};

    fn frame() -> Frame {
        let mut n = node("node-a");
        for i in 0..8 {
            n = n.device(gpu(i, "H100-80GB").job(1));
        }
        Frame {
            nodes: vec![n.build()],
            jobs: vec![
                job(1).name("train").gpus(8).running_on("node-a", &["0,1,2,3,4,5,6,7"]).build(),
                job(2).gpus(4).reason("waiting for 4 GPUs").build(),
            ],
            error: None,
        }
    }

    fn text_at(width: u16, height: u16) -> String {
        let mut term = Terminal::new(TestBackend::new(width, height)).expect("terminal");
        term.draw(|f| draw(f, &frame(), "http://127.0.0.1:7878")).expect("draws");
        buffer_text(term.backend())
    }

    /// No size of window, down to nothing, makes top fail; below its
    /// minimum it says what it needs instead of drawing cut panes.
    #[test]
    fn every_window_size_draws_and_tiny_ones_say_so() {
        for width in [0, 1, 5, 20, 40, 59, 60, 61, 80, 200] {
            for height in [0, 1, 3, 8, 12, 13, 14, 24, 60] {
                let text = text_at(width, height);
                let tiny = width < MIN_WIDTH || height < MIN_HEIGHT;
                if tiny && width >= 20 && height >= 3 {
                    assert!(text.contains("needs 60x13"), "{width}x{height}: {text}");
                }
                if !tiny {
                    for pane in ["gpool top", " GPUs ", " Running ", " Pending "] {
                        assert!(text.contains(pane), "{width}x{height}: no {pane:?} in {text}");
                    }
                }
            }
        }
        assert!(text_at(120, 30).contains("train"));
    }
}
