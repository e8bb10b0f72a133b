//! SVG line charts, written by hand: no plotting dependency.

use std::fmt::Write;

/// One line of a chart.
pub struct Line<'a> {
    pub name: &'a str,
    pub points: Vec<(f64, f64)>,
}

/// Chart options.
pub struct Chart<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub log_x: bool,
}

const W: f64 = 760.0;
const H: f64 = 420.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 170.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
const COLORS: [&str; 8] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

fn nice(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// Renders lines into an SVG document.
pub fn line_chart(c: &Chart<'_>, lines: &[Line<'_>]) -> String {
    let fx = |x: f64| if c.log_x { x.max(1e-9).log10() } else { x };
    let pts = lines.iter().flat_map(|l| l.points.iter()).filter(|(x, y)| x.is_finite() && y.is_finite());
    let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, f64::NEG_INFINITY);
    for &(x, y) in pts {
        x0 = x0.min(fx(x));
        x1 = x1.max(fx(x));
        y1 = y1.max(y);
    }
    if !x0.is_finite() {
        (x0, x1, y1) = (0.0, 1.0, 1.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let y1 = if y1 <= 0.0 { 1.0 } else { y1 * 1.05 };
    let pw = W - LEFT - RIGHT;
    let ph = H - TOP - BOTTOM;
    let sx = |x: f64| LEFT + (fx(x) - x0) / (x1 - x0) * pw;
    let sy = |y: f64| TOP + ph - y / y1 * ph;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" font-size="15" text-anchor="middle">{}</text>"#,
        LEFT + pw / 2.0,
        esc(c.title)
    );
    for i in 0..=5 {
        let y = y1 * f64::from(i) / 5.0;
        let py = sy(y);
        let _ =
            writeln!(s, r##"<line x1="{LEFT}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#e5e5e5"/>"##, LEFT + pw);
        let _ = writeln!(s, r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#, LEFT - 6.0, py + 4.0, nice(y));
    }
    for i in 0..=5 {
        let v = x0 + (x1 - x0) * f64::from(i) / 5.0;
        let px = LEFT + pw * f64::from(i) / 5.0;
        let label = if c.log_x { nice(10f64.powf(v)) } else { nice(v) };
        let _ = writeln!(s, r#"<text x="{px:.1}" y="{:.1}" text-anchor="middle">{label}</text>"#, TOP + ph + 18.0);
    }
    let _ = writeln!(s, r##"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>"##);
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        LEFT + pw / 2.0,
        H - 10.0,
        esc(c.x_label)
    );
    let _ = writeln!(
        s,
        r#"<text x="16" y="{:.1}" text-anchor="middle" transform="rotate(-90 16 {:.1})">{}</text>"#,
        TOP + ph / 2.0,
        TOP + ph / 2.0,
        esc(c.y_label)
    );
    for (i, l) in lines.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let mut d = String::new();
        for (x, y) in l.points.iter().filter(|(x, y)| x.is_finite() && y.is_finite() && (!c.log_x || *x > 0.0)) {
            let _ = write!(d, "{}{:.1},{:.1}", if d.is_empty() { "M" } else { " L" }, sx(*x), sy(*y));
        }
        let _ = writeln!(s, r#"<path d="{d}" fill="none" stroke="{color}" stroke-width="1.6"/>"#);
        let ly = TOP + 14.0 + 18.0 * i as f64;
        let lx = LEFT + pw + 14.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="3"/>"#,
            lx + 18.0
        );
        let _ = writeln!(s, r#"<text x="{}" y="{}">{}</text>"#, lx + 24.0, ly + 4.0, esc(l.name));
    }
    s.push_str("</svg>\n");
    s
}

/// The empirical CDF of `values` as at most `max_points` points.
pub fn cdf(values: &[f64], max_points: usize) -> Vec<(f64, f64)> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return Vec::new();
    }
    let step = (n / max_points.max(1)).max(1);
    let mut out: Vec<(f64, f64)> = (0..n).step_by(step).map(|i| (v[i], (i + 1) as f64 / n as f64)).collect();
    out.push((v[n - 1], 1.0));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_well_formed_svg_with_every_line() {
        let lines = [
            Line { name: "a<b", points: vec![(1.0, 0.1), (10.0, 0.5), (100.0, 1.0)] },
            Line { name: "c", points: vec![] },
        ];
        let svg = line_chart(&Chart { title: "JCT", x_label: "s", y_label: "share", log_x: true }, &lines);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<path").count(), 2);
        assert!(svg.contains("a&lt;b"));
        assert!(!svg.contains("NaN"));
    }

    #[test]
    fn cdf_ends_at_one_and_is_monotone() {
        let c = cdf(&[3.0, 1.0, 2.0, f64::NAN], 10);
        assert_eq!(c.last(), Some(&(3.0, 1.0)));
        assert!(c.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
    }
}
