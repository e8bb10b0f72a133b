//! Values as nvidia-smi prints them: missing markers, numbers with units.
//!
//! A value nvidia-smi marks as missing (`[N/A]`, `N/A`, `[Not Supported]`,
//! `ERR!`, `[Requested functionality has been deprecated]`, any other
//! `[…]` message, `-` in `dmon`) is `None`. So is a number that does not
//! parse or carries a unit we do not know: a new driver's odd value costs one
//! metric, never the sample.

/// The value, trimmed, or `None` when nvidia-smi says it is missing.
pub fn present(v: &str) -> Option<&str> {
    let t = v.trim();
    if t.is_empty() || (t.starts_with('[') && t.ends_with(']')) {
        return None;
    }
    let missing = [
        "n/a",
        "na",
        "err!",
        "-",
        "not supported",
        "requested functionality has been deprecated",
        "unknown error",
        "insufficient permissions",
        "gpu is lost",
    ];
    if missing.iter().any(|m| t.eq_ignore_ascii_case(m)) { None } else { Some(t) }
}

/// `"11125 MiB"` → `(11125.0, "MiB")`; `"38C"` → `(38.0, "C")`; `"0 %"` → `(0.0, "%")`.
/// `None` for a missing value or one that does not start with a finite number.
pub fn number_unit(v: &str) -> Option<(f64, &str)> {
    let t = present(v)?;
    let bytes = t.as_bytes();
    let mut end = 0;
    if matches!(bytes.first(), Some(b'-' | b'+')) {
        end = 1;
    }
    let digits_start = end;
    while end < bytes.len() && (bytes[end].is_ascii_digit() || bytes[end] == b'.') {
        end += 1;
    }
    if end == digits_start {
        return None;
    }
    // `end` is at an ASCII boundary, so slicing cannot split a character.
    let n: f64 = t.get(..end)?.parse().ok()?;
    n.is_finite().then_some((n, t.get(end..)?.trim()))
}

/// The unit to use: the value's own, else the header's (`nounits` output).
fn unit<'a>(own: &'a str, header: Option<&'a str>) -> &'a str {
    if own.is_empty() { header.unwrap_or("") } else { own }
}

/// A size in MiB (`MiB`, `GiB`, `KiB`, `MB`, `GB`, `B`, or no unit = MiB).
pub fn mib(v: &str, header_unit: Option<&str>) -> Option<u64> {
    let (n, own) = number_unit(v)?;
    let factor = match unit(own, header_unit) {
        "" | "MiB" | "MB" => 1.0,
        "GiB" | "GB" => 1024.0,
        "KiB" | "KB" => 1.0 / 1024.0,
        "B" => 1.0 / (1024.0 * 1024.0),
        _ => return None,
    };
    non_negative_u64(n * factor)
}

/// Watts (`W`, `mW`, `kW`, or no unit = W).
pub fn watts(v: &str, header_unit: Option<&str>) -> Option<f64> {
    let (n, own) = number_unit(v)?;
    match unit(own, header_unit) {
        "" | "W" => Some(n),
        "mW" => Some(n / 1000.0),
        "kW" => Some(n * 1000.0),
        _ => None,
    }
}

/// Megahertz (`MHz`, `GHz`, `kHz`, or no unit = MHz).
pub fn mhz(v: &str, header_unit: Option<&str>) -> Option<u32> {
    let (n, own) = number_unit(v)?;
    let mhz = match unit(own, header_unit) {
        "" | "MHz" => n,
        "GHz" => n * 1000.0,
        "kHz" => n / 1000.0,
        _ => return None,
    };
    non_negative_u64(mhz).and_then(|m| u32::try_from(m).ok())
}

/// A percentage (`%` or no unit).
pub fn percent(v: &str, header_unit: Option<&str>) -> Option<f64> {
    let (n, own) = number_unit(v)?;
    matches!(unit(own, header_unit), "" | "%").then_some(n)
}

/// A throughput in bytes per second, from `KB/s` (as the report prints it;
/// nvidia-smi's KB are 1024 bytes, as NVML's), `MB/s` or `B/s`.
pub fn bytes_per_s(v: &str) -> Option<f64> {
    let (n, own) = number_unit(v)?;
    let factor = match own {
        "KB/s" => 1024.0,
        "MB/s" => 1024.0 * 1024.0,
        "B/s" => 1.0,
        _ => return None,
    };
    (n >= 0.0).then_some(n * factor)
}

/// Degrees Celsius (`C` or no unit).
pub fn celsius(v: &str, header_unit: Option<&str>) -> Option<f64> {
    let (n, own) = number_unit(v)?;
    matches!(unit(own, header_unit), "" | "C").then_some(n)
}

/// A plain count (`0`, `12`).
pub fn count(v: &str) -> Option<u64> {
    present(v)?.parse().ok()
}

/// A small id or index (`0`, `13`).
pub fn id(v: &str) -> Option<u32> {
    present(v)?.parse().ok()
}

/// A hexadecimal bitmask (`0x0000000000000001`).
pub fn hex(v: &str) -> Option<u64> {
    let t = present(v)?;
    let digits = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X"))?;
    u64::from_str_radix(digits, 16).ok()
}

/// `Enabled` → `true`, `Disabled` → `false`, anything else (`N/A`) → `None`.
pub fn enabled(v: &str) -> Option<bool> {
    match present(v)?.to_ascii_lowercase().as_str() {
        "enabled" | "on" | "yes" => Some(true),
        "disabled" | "off" | "no" => Some(false),
        _ => None,
    }
}

fn non_negative_u64(x: f64) -> Option<u64> {
    // `as` saturates; the range check keeps absurd values out instead.
    (0.0..1.8e19).contains(&x).then(|| x.round() as u64)
}

/// PCI bus ids compare equal whatever the domain width or case
/// (`00000000:19:00.0` = `0000:19:00.0`).
pub fn same_bus_id(a: &str, b: &str) -> bool {
    fn norm(s: &str) -> String {
        let s = s.trim().to_ascii_lowercase();
        match s.split_once(':') {
            Some((domain, rest)) => format!("{}:{rest}", domain.trim_start_matches('0')),
            None => s,
        }
    }
    norm(a) == norm(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_markers_are_none_and_numbers_keep_their_units() {
        for v in ["[N/A]", "N/A", "[Not Supported]", "ERR!", "[Requested functionality has been deprecated]", "", " - "]
        {
            assert_eq!(present(v), None, "{v}");
            assert_eq!(mib(v, Some("MiB")), None, "{v}");
        }
        assert_eq!(mib("11125 MiB", Some("MiB")), Some(11125));
        assert_eq!(mib("11125", Some("MiB")), Some(11125));
        assert_eq!(mib("2 GiB", None), Some(2048));
        assert_eq!(mib("12 parsecs", None), None);
        assert_eq!(watts("631.95 W", Some("W")), Some(631.95));
        assert_eq!(watts("49W", None), Some(49.0));
        assert_eq!(mhz("1980 MHz", None), Some(1980));
        assert_eq!(percent("100 %", Some("%")), Some(100.0));
        assert_eq!(percent("0%", None), Some(0.0));
        assert_eq!(celsius("38C", None), Some(38.0));
        assert_eq!(celsius("42", None), Some(42.0));
        assert_eq!(hex("0x0000000000000001"), Some(1));
        assert_eq!(hex("1"), None);
        assert_eq!(enabled("Enabled"), Some(true));
        assert_eq!(enabled("[N/A]"), None);
        assert_eq!(number_unit("-"), None);
        assert_eq!(number_unit("."), None);
        assert_eq!(mib("-5 MiB", None), None);
        assert!(same_bus_id("00000000:19:00.0", "0000:19:00.0"));
        assert!(!same_bus_id("00000000:19:00.0", "00000000:1A:00.0"));
    }
}
