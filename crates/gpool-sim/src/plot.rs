//! SVG line charts, written by hand: no plotting dependency (the charts are
//! three kinds of line; `plotters` would add a font stack for them). The
//! axes use "nice numbers" (Heckbert, Graphics Gems, 1990): ticks at 1, 2 or
//! 5 × 10^k that cover the data, labelled with just the decimals their step
//! needs; log axes tick at each power of ten.

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

/// Ticks at a "nice" step (1, 2 or 5 × 10^k) that cover `[lo, hi]`, about
/// `target` of them; the first and last tick bound the axis.
pub fn linear_ticks(lo: f64, hi: f64, target: usize) -> Vec<f64> {
    let (lo, hi) = if hi > lo { (lo, hi) } else { (lo, lo + 1.0) };
    let raw = (hi - lo) / target.max(1) as f64;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * magnitude).find(|s| *s >= raw * (1.0 - 1e-9)).unwrap_or(raw);
    let first = (lo / step + 1e-9).floor();
    let last = (hi / step - 1e-9).ceil();
    // Multiples of the step, so that 0.1 × 3 prints as 0.3.
    (first as i64..=last as i64).map(|i| i as f64 * step).collect()
}

/// Powers of ten that cover `[lo, hi]` (both > 0), with 2 and 5 between
/// them when the data spans less than two decades.
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let (a, b) = (lo.max(1e-9).log10().floor() as i32, hi.max(lo * 10.0).log10().ceil() as i32);
    let mut ticks = Vec::new();
    for k in a..=b {
        let p = 10f64.powi(k);
        ticks.push(p);
        if b - a <= 2 && k < b {
            ticks.extend([2.0 * p, 5.0 * p]);
        }
    }
    ticks
}

/// A tick's label with the decimals its step needs: `0.25`, `1,500` → `1.5k`, `2M`.
pub fn tick_label(v: f64, step: f64) -> String {
    let (scaled, unit, step) = match v.abs().max(step.abs()) {
        a if a >= 1e6 => (v / 1e6, "M", step / 1e6),
        a if a >= 1e4 => (v / 1e3, "k", step / 1e3),
        _ => (v, "", step),
    };
    let decimals = if step > 0.0 { (-step.log10().floor()).clamp(0.0, 6.0) as usize } else { 0 };
    // A step of 2.5 × 10^k has one decimal more than its magnitude says.
    let decimals = if (step * 10f64.powi(decimals as i32)).fract().abs() > 1e-6 { decimals + 1 } else { decimals };
    let text = format!("{scaled:.decimals$}");
    if scaled == 0.0 && !unit.is_empty() { "0".to_string() } else { format!("{text}{unit}") }
}

/// Renders lines into an SVG document.
pub fn line_chart(c: &Chart<'_>, lines: &[Line<'_>]) -> String {
    let fx = |x: f64| if c.log_x { x.max(1e-9).log10() } else { x };
    let pts = lines
        .iter()
        .flat_map(|l| l.points.iter())
        .filter(|(x, y)| x.is_finite() && y.is_finite() && (!c.log_x || *x > 0.0));
    let (mut lo, mut hi, mut y_max) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
    for &(x, y) in pts {
        lo = lo.min(x);
        hi = hi.max(x);
        y_max = y_max.max(y);
    }
    if !lo.is_finite() {
        (lo, hi) = (1.0, 10.0);
    }
    let x_ticks = if c.log_x { log_ticks(lo, hi) } else { linear_ticks(lo, hi, 6) };
    let y_ticks = linear_ticks(0.0, if y_max > 0.0 { y_max } else { 1.0 }, 5);
    let x_step = if c.log_x { 1.0 } else { x_ticks.get(1).zip(x_ticks.first()).map_or(1.0, |(b, a)| b - a) };
    let y_step = y_ticks.get(1).zip(y_ticks.first()).map_or(1.0, |(b, a)| b - a);
    let x0 = x_ticks.first().map_or(0.0, |&t| fx(t));
    let x1 = x_ticks.last().map_or(1.0, |&t| fx(t)).max(x0 + 1e-9);
    let y1 = y_ticks.last().copied().unwrap_or(1.0).max(1e-9);
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
    for &y in &y_ticks {
        let py = sy(y);
        let _ =
            writeln!(s, r##"<line x1="{LEFT}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#e5e5e5"/>"##, LEFT + pw);
        let label = tick_label(y, y_step);
        let _ = writeln!(s, r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{label}</text>"#, LEFT - 6.0, py + 4.0);
    }
    for &x in &x_ticks {
        let px = sx(x);
        let _ = writeln!(s, r##"<line x1="{px:.1}" y1="{TOP}" x2="{px:.1}" y2="{:.1}" stroke="#f0f0f0"/>"##, TOP + ph);
        let label = tick_label(x, if c.log_x { x } else { x_step });
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
    fn ticks_are_nice_numbers_that_cover_the_data() {
        let labels = |ticks: &[f64]| {
            let step = ticks[1] - ticks[0];
            ticks.iter().map(|&t| tick_label(t, step)).collect::<Vec<_>>().join(" ")
        };
        assert_eq!(labels(&linear_ticks(0.0, 0.97, 5)), "0.0 0.2 0.4 0.6 0.8 1.0");
        assert_eq!(labels(&linear_ticks(0.0, 1234.0, 5)), "0 500 1000 1500");
        assert_eq!(labels(&linear_ticks(0.0, 71.3, 6)), "0 20 40 60 80");
        assert_eq!(labels(&linear_ticks(0.0, 3.0e6, 5)), "0 1M 2M 3M");
        assert_eq!(labels(&linear_ticks(0.0, 45_000.0, 5)), "0 10k 20k 30k 40k 50k");
        assert_eq!(labels(&linear_ticks(0.3, 0.31, 5)), "0.300 0.302 0.304 0.306 0.308 0.310");
        let decades: Vec<String> = log_ticks(3.0, 250_000.0).iter().map(|&t| tick_label(t, t)).collect();
        assert_eq!(decades.join(" "), "1 10 100 1000 10k 100k 1M");
        assert_eq!(log_ticks(2.0, 40.0), vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]);
        for (lo, hi) in [(0.0, 0.0), (5.0, 5.0), (-1.0, 1.0), (0.0, 1e-12)] {
            let t = linear_ticks(lo, hi, 5);
            assert!(t.len() >= 2 && t[0] <= lo && *t.last().unwrap_or(&f64::NAN) >= hi, "{lo}..{hi}: {t:?}");
        }
    }

    #[test]
    fn cdf_ends_at_one_and_is_monotone() {
        let c = cdf(&[3.0, 1.0, 2.0, f64::NAN], 10);
        assert_eq!(c.last(), Some(&(3.0, 1.0)));
        assert!(c.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
    }
}
