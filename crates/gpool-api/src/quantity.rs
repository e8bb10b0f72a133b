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
        hint: "use e.g. 500ms, 90s, 30m, 2h, 1h30m, 1d or a number of seconds",
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
    let mut total = 0.0;
    let mut num = String::new();
    let mut any = false;
    let mut chars = t.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() || c == '.' {
            num.push(c);
            continue;
        }
        let unit = match c {
            's' => 1.0,
            'm' if chars.peek() == Some(&'s') => {
                chars.next();
                0.001
            }
            'm' => 60.0,
            'h' => 3600.0,
            'd' => 86_400.0,
            _ => return Err(err()),
        };
        let v: f64 = num.parse().map_err(|_| err())?;
        total += v * unit;
        num.clear();
        any = true;
    }
    if !num.is_empty() || !any || !total.is_finite() || total >= 1e12 {
        return Err(err());
    }
    Ok(Duration::from_secs_f64(total))
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
