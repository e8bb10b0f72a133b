//! The pictures of a profile: a flame graph of its stacks (inferno, the
//! Rust port of Brendan Gregg's flamegraph.pl) and a timeline of its
//! devices' utilisation and memory over the window. Both are SVG documents
//! a browser opens as they are.

use std::fmt::Write as _;

use inferno::flamegraph::{self, Options};

use super::profile_doc::StoredProfile;

/// The flame graph of every profiled replica's stacks; with several
/// replicas, each one's stacks sit under a `rank R (node)` root.
pub fn flamegraph(p: &StoredProfile) -> Result<String, String> {
    let several = p.replicas.len() > 1;
    let mut lines: Vec<String> = Vec::new();
    for r in &p.replicas {
        for line in
            r.capture.stacks.lines().filter(|l| gpool_core::profile::parse_collapsed(l).is_ok_and(|s| !s.is_empty()))
        {
            lines.push(if several { format!("rank {} ({});{line}", r.rank, r.node) } else { line.to_string() });
        }
    }
    if lines.is_empty() {
        return Err(format!("job {}'s profile has no stacks: {}", p.job, p.errors()));
    }
    let mut opts = Options::default();
    opts.title = format!("job {} · {} s from {}", p.job, p.seconds, gpool_api::time::rfc3339(p.taken_ms));
    opts.count_name = "samples".into();
    let mut out = Vec::new();
    flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), &mut out)
        .map_err(|e| format!("cannot draw the flame graph: {e}"))?;
    String::from_utf8(out).map_err(|e| format!("the flame graph is not UTF-8: {e}"))
}

const W: f64 = 900.0;
const H: f64 = 320.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 70.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
const COLOURS: &[&str] = &["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"];

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// Each device's utilisation (solid, left axis, percent) and memory
/// (dashed, right axis, GiB) over the profile's window.
pub fn timeline(p: &StoredProfile) -> String {
    let span_ms = (u64::from(p.seconds) * 1000).max(1) as f64;
    let mut devices: Vec<(String, Vec<(f64, f64, Option<u64>)>)> = Vec::new();
    for r in &p.replicas {
        for s in &r.capture.samples {
            let name = format!("rank {} {}", r.rank, s.device);
            let at = match devices.iter().position(|(n, _)| *n == name) {
                Some(i) => i,
                None => {
                    devices.push((name, Vec::new()));
                    devices.len() - 1
                }
            };
            devices[at].1.push((s.t_ms as f64, s.util_pct.clamp(0.0, 100.0), s.memory_used_mb));
        }
    }
    let max_mem = devices.iter().flat_map(|(_, v)| v.iter().filter_map(|x| x.2)).max().unwrap_or(0).max(1) as f64;
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let x = |t: f64| LEFT + (t / span_ms).clamp(0.0, 1.0) * pw;
    let y = |frac: f64| TOP + ph * (1.0 - frac.clamp(0.0, 1.0));
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = write!(svg, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let title =
        format!("job {} · accelerator utilisation (solid, %) and memory (dashed, GiB) over {} s", p.job, p.seconds);
    let _ = write!(svg, r#"<text x="{LEFT}" y="22" font-size="14">{}</text>"#, escape(&title));
    for i in 0..=4 {
        let frac = f64::from(i) / 4.0;
        let yy = y(frac);
        let _ = write!(svg, r##"<line x1="{LEFT}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#ddd"/>"##, LEFT + pw);
        let _ = write!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{:.0}%</text>"#,
            LEFT - 6.0,
            yy + 4.0,
            frac * 100.0
        );
        let gib = frac * max_mem / 1024.0;
        let _ = write!(svg, r#"<text x="{:.1}" y="{:.1}">{gib:.1} GiB</text>"#, LEFT + pw + 6.0, yy + 4.0);
    }
    for i in 0..=p.seconds.min(60) {
        let t = f64::from(i) * span_ms / f64::from(p.seconds.clamp(1, 60));
        let _ = write!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{:.0}s</text>"#,
            x(t),
            TOP + ph + 18.0,
            t / 1000.0
        );
    }
    let _ = write!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">seconds into the profile</text>"#,
        LEFT + pw / 2.0,
        H - 8.0
    );
    if devices.is_empty() {
        let _ = write!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">no device readings (no accelerator, or its tool did not answer)</text>"#,
            LEFT + pw / 2.0,
            TOP + ph / 2.0
        );
    }
    for (i, (name, pts)) in devices.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let util: Vec<String> = pts.iter().map(|(t, u, _)| format!("{:.1},{:.1}", x(*t), y(u / 100.0))).collect();
        let _ =
            write!(svg, r#"<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{}"/>"#, util.join(" "));
        let mem: Vec<String> = pts
            .iter()
            .filter_map(|(t, _, m)| Some(format!("{:.1},{:.1}", x(*t), y(m.map(|m| m as f64 / max_mem)?))))
            .collect();
        if !mem.is_empty() {
            let _ = write!(
                svg,
                r#"<polyline fill="none" stroke="{colour}" stroke-width="1" stroke-dasharray="4 3" points="{}"/>"#,
                mem.join(" ")
            );
        }
        let _ = write!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" fill="{colour}">{}</text>"#,
            LEFT + 8.0 + 260.0 * i as f64,
            TOP - 6.0,
            escape(name)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plane::profile_doc::ReplicaCapture;
    use gpool_api::agent::{DeviceReading, ProfileCapture};

    fn profile(replicas: usize, stacks: &str) -> StoredProfile {
        StoredProfile {
            job: 3,
            attempt: 1,
            taken_ms: 0,
            seconds: 5,
            native: false,
            replicas: (0..replicas as u32)
                .map(|rank| ReplicaCapture {
                    node: format!("n{rank}"),
                    rank,
                    capture: ProfileCapture {
                        pid: Some(10),
                        stacks: stacks.into(),
                        samples: (0..50)
                            .map(|i| DeviceReading {
                                t_ms: i * 100,
                                device: "GPU-<a&b>".into(),
                                util_pct: (i % 10) as f64 * 10.0,
                                memory_used_mb: Some(2048),
                            })
                            .collect(),
                        error: None,
                    },
                })
                .collect(),
        }
    }

    #[test]
    fn the_flame_graph_shows_the_frames_and_each_rank() {
        let stacks = "<module> (t.py:1);__getitem__ (t.py:5) 400\n<module> (t.py:1);step (t.py:9) 100\n";
        let one = flamegraph(&profile(1, stacks)).expect("drawn");
        assert!(one.starts_with("<?xml") && one.contains("__getitem__") && !one.contains("rank 0"), "{}", &one[..200]);
        let two = flamegraph(&profile(2, stacks)).expect("drawn");
        assert!(two.contains("rank 0 (n0)") && two.contains("rank 1 (n1)"));
    }

    #[test]
    fn a_profile_without_stacks_has_no_flame_graph_and_says_why() {
        let mut p = profile(1, "");
        p.replicas[0].capture.error = Some("py-spy is not installed".into());
        let err = flamegraph(&p).expect_err("nothing to draw");
        assert!(err.contains("py-spy is not installed"), "{err}");
    }

    #[test]
    fn the_timeline_draws_each_device_and_escapes_names() {
        let svg = timeline(&profile(2, ""));
        assert_eq!(svg.matches("<polyline").count(), 4, "utilisation and memory of two devices");
        assert!(svg.contains("GPU-&lt;a&amp;b&gt;") && !svg.contains("<a&b>"));
        let none = timeline(&StoredProfile { replicas: Vec::new(), ..profile(0, "") });
        assert!(none.contains("no device readings"));
    }
}
