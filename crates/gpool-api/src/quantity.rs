//! Kubernetes-style quantities and human durations.

use std::time::Duration;

/// Why a quantity or duration could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a valid {what}: {hint}")]
pub struct QuantityError {
    pub input: String,
    pub what: &'static str,
    pub hint: &'static str,
}

/// Bytes from `32Gi`, `512Mi`, `1G`, `1000` (bytes), `1.5Gi`.
pub fn parse_bytes(s: &str) -> Result<u64, QuantityError> {
    let err = || QuantityError {
        input: s.to_string(),
        what: "memory size",
        hint: "use e.g. 512Mi, 32Gi, 1G or a number of bytes",
    };
    let t = s.trim();
    let units: [(&str, f64); 12] = [
        ("Ki", 1024.0),
        ("Mi", 1024.0 * 1024.0),
        ("Gi", 1024.0 * 1024.0 * 1024.0),
        ("Ti", 1024f64.powi(4)),
        ("k", 1e3),
        ("K", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("KB", 1e3),
        ("MB", 1e6),
        ("GB", 1e9),
    ];
    let (num, mult) = units
        .iter()
        .filter(|(u, _)| t.ends_with(u))
        .max_by_key(|(u, _)| u.len())
        .map_or((t, 1.0), |(u, m)| (&t[..t.len() - u.len()], *m));
    let v: f64 = num.trim().parse().map_err(|_| err())?;
    if !v.is_finite() || v < 0.0 || v * mult > u64::MAX as f64 {
        return Err(err());
    }
    Ok((v * mult).round() as u64)
}

/// Thousandths of a CPU from `8`, `2.5`, `500m`.
pub fn parse_cpu_milli(s: &str) -> Result<u64, QuantityError> {
    let err = || QuantityError { input: s.to_string(), what: "CPU amount", hint: "use e.g. 8, 2.5 or 500m" };
    let t = s.trim();
    let (num, mult) = match t.strip_suffix('m') {
        Some(n) => (n, 1.0),
        None => (t, 1000.0),
    };
    let v: f64 = num.parse().map_err(|_| err())?;
    if !v.is_finite() || !(0.0..=1e9).contains(&v) {
        return Err(err());
    }
    Ok((v * mult).round() as u64)
}

/// A duration from `90s`, `30m`, `2h`, `1h30m`, `1d`, `1.5h`, `500ms` or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration, QuantityError> {
    let err = || QuantityError {
        input: s.to_string(),
        what: "duration",
        hint: "use e.g. 500ms, 90s, 30m, 90min, 2h, 1h30m, 1d, a number of seconds, \
               or Slurm's HH:MM:SS, MM:SS, D-HH, D-HH:MM, D-HH:MM:SS",
    };
    let t = s.trim();
    if t.is_empty() {
        return Err(err());
    }
    if let Ok(secs) = t.parse::<f64>() {
        return if secs.is_finite() && (0.0..1e12).contains(&secs) {
            Ok(Duration::from_secs_f64(secs))
        } else {
            Err(err())
        };
    }
    if t.contains([':', '-']) {
        return slurm_time(t).map(Duration::from_secs).ok_or_else(err);
    }
    let mut total = 0.0;
    let mut rest = t;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let (num, after) = rest.split_at(digits);
        let letters = after.find(|c: char| !c.is_ascii_alphabetic()).unwrap_or(after.len());
        let (unit, next) = after.split_at(letters);
        let unit = match unit.to_ascii_lowercase().as_str() {
            "ms" => 0.001,
            "s" | "sec" | "secs" | "second" | "seconds" => 1.0,
            "m" | "min" | "mins" | "minute" | "minutes" => 60.0,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3600.0,
            "d" | "day" | "days" => 86_400.0,
            "w" | "week" | "weeks" => 604_800.0,
            _ => return Err(err()),
        };
        let v: f64 = num.parse().map_err(|_| err())?;
        total += v * unit;
        rest = next.trim_start();
    }
    if !total.is_finite() || total >= 1e12 {
        return Err(err());
    }
    Ok(Duration::from_secs_f64(total))
}

/// Slurm's time forms (`sbatch -t`): `MM:SS`, `HH:MM:SS`, `D-HH`,
/// `D-HH:MM`, `D-HH:MM:SS`, in seconds. (A bare number, minutes to Slurm,
/// is seconds to gpool, as everywhere else in it.)
fn slurm_time(t: &str) -> Option<u64> {
    let num = |x: &str| -> Option<u64> { (!x.is_empty() && x.len() <= 6).then(|| x.parse().ok()).flatten() };
    let (days, clock) = match t.split_once('-') {
        Some((d, c)) => (num(d)?, c),
        None => (0, t),
    };
    let parts: Vec<u64> = clock.split(':').map(num).collect::<Option<_>>()?;
    let with_days = t.contains('-');
    let (h, m, sec) = match (with_days, parts.as_slice()) {
        (true, [h]) => (*h, 0, 0),
        (true, [h, m]) => (*h, *m, 0),
        (_, [h, m, sec]) => (*h, *m, *sec),
        (false, [m, sec]) => (0, *m, *sec),
        _ => return None,
    };
    // Each field below the first counts up to its unit, as on a clock.
    let hours_given = with_days || parts.len() == 3;
    if sec >= 60 || (hours_given && m >= 60) || (with_days && h >= 24) {
        return None;
    }
    Some(days * 86_400 + h * 3600 + m * 60 + sec)
}

/// Formats a duration as `2h30m`, `45s`.
pub fn format_duration(d: Duration) -> String {
    let s = d.as_secs();
    let (h, m, sec) = (s / 3600, (s % 3600) / 60, s % 60);
    match (h, m, sec) {
        (0, 0, s) => format!("{s}s"),
        (0, m, 0) => format!("{m}m"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, 0, 0) => format!("{h}h"),
        (h, m, _) => format!("{h}h{m}m"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes() {
        let cases = [
            ("32Gi", Some(32 << 30)),
            ("512Mi", Some(512 << 20)),
            ("1G", Some(1_000_000_000)),
            ("1000", Some(1000)),
            ("1.5Gi", Some(1_610_612_736)),
            ("x", None),
            ("-1Gi", None),
            ("1Qi", None),
        ];
        for (s, want) in cases {
            assert_eq!(parse_bytes(s).ok(), want, "{s}");
        }
    }

    #[test]
    fn cpus() {
        let cases = [("8", Some(8000)), ("2.5", Some(2500)), ("500m", Some(500)), ("-1", None), ("lots", None)];
        for (s, want) in cases {
            assert_eq!(parse_cpu_milli(s).ok(), want, "{s}");
        }
    }

    #[test]
    fn durations() {
        let cases = [
            ("90s", Some(90)),
            ("30m", Some(1800)),
            ("2h", Some(7200)),
            ("1h30m", Some(5400)),
            ("1d", Some(86_400)),
            ("1.5h", Some(5400)),
            ("45", Some(45)),
            ("", None),
            ("2x", None),
            ("h", None),
            ("1h30", None),
            ("-5", None),
            ("90min", Some(5400)),
            ("2hours", Some(7200)),
            ("1h 30m", Some(5400)),
            ("1w", Some(604_800)),
            // Slurm's forms.
            ("02:00:00", Some(7200)),
            ("1-12:00:00", Some(129_600)),
            ("1-12", Some(129_600)),
            ("1-12:30", Some(131_400)),
            ("10:30", Some(630)),
            ("1:2:3:4", None),
            ("1-", None),
            ("-1", None),
            ("00:61", None),
            ("a:b", None),
        ];
        for (s, want) in cases {
            assert_eq!(parse_duration(s).ok().map(|d| d.as_secs()), want, "{s}");
        }
        assert_eq!(parse_duration("500ms").ok(), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("1m500ms").ok(), Some(Duration::from_millis(60_500)));
        assert!(parse_duration("5mss").is_err());
        assert_eq!(format_duration(Duration::from_secs(9000)), "2h30m");
        assert_eq!(format_duration(Duration::from_secs(45)), "45s");
    }
}
