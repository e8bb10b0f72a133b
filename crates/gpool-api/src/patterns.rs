//! Regular expressions the API document gives for text fields, so that a
//! client (or a fuzzer) knows what the server takes before it asks. Each
//! matches a subset of what the server's own check accepts (the check stays
//! the authority, and its error says what was wrong); they are written for
//! both ECMA-262 and Python's `re` (no `\p{…}` classes).

/// A duration as `quantity::parse_duration` reads it: a number of seconds,
/// a number with a unit (`500ms`, `90s`, `30m`, `2h`, `1d`, `2w`), or
/// Slurm's `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`, `D-HH:MM:SS`.
pub const DURATION: &str = r"^\s*([0-9]{1,9}(\.[0-9]{1,3})?(ms|s|sec|m|min|h|hr|d|w)?|[0-9]{1,6}(:[0-5]?[0-9]){1,2}|[0-9]{1,6}-([01]?[0-9]|2[0-3])(:[0-5]?[0-9]){0,2})\s*$";

/// A duration more than zero (a lookahead refuses the spellings of zero).
pub const POSITIVE_DURATION: &str = r"^(?![\s0.:-]*(ms|s|sec|m|min|h|hr|d|w)?\s*$)\s*([0-9]{1,9}(\.[0-9]{1,3})?(ms|s|sec|m|min|h|hr|d|w)?|[0-9]{1,6}(:[0-5]?[0-9]){1,2}|[0-9]{1,6}-([01]?[0-9]|2[0-3])(:[0-5]?[0-9]){0,2})\s*$";

/// Text with no control character and no invisible format character (bidi
/// overrides, zero-width characters), as `plane/input.rs` checks names.
pub const TEXT: &str = "^[^\\x00-\\x1f\\x7f-\\x9f\\xad\\u061c\\u180e\\u200b-\\u200f\\u202a-\\u202e\\u2060-\\u206f\\ufeff\\ufff9-\\ufffb]*$";

/// A user's or team's name: not blank, no whitespace, no control or invisible format character.
pub const IDENTITY: &str = "^[^\\s\\x00-\\x1f\\x7f-\\x9f\\xad\\u061c\\u180e\\u200b-\\u200f\\u202a-\\u202e\\u2060-\\u206f\\ufeff\\ufff9-\\ufffb]+$";

/// A job state, or a comma-separated list of them (`active`: the four that have not ended).
pub const STATES: &str = "^(pending|starting|running|stopping|succeeded|failed|cancelled|timed_out|active)?(,(pending|starting|running|stopping|succeeded|failed|cancelled|timed_out|active)?)*$";

/// A registry host as `gpool registry login` takes it (`ghcr.io`, `localhost:5000`; a scheme and trailing slash are dropped).
pub const REGISTRY: &str = "^\\s*(https?://)?[^\\s/\\x00-\\x1f\\x7f-\\x9f]+/*\\s*$";

/// A token's id: hex digits, at least six (a prefix, as `gpool token list` shows it).
pub const TOKEN_ID: &str = "^\\s*[0-9A-Fa-f]{6,}\\s*$";

/// An absolute path.
pub const ABSOLUTE_PATH: &str = "^/[^\\x00]*$";

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, s: &str) -> bool {
        regex::Regex::new(pattern).expect("a valid pattern").is_match(s)
    }

    /// What the pattern takes parses; what it refuses is refused by the parser too.
    #[test]
    fn every_duration_the_pattern_takes_parses() {
        for ok in [
            "90",
            "1.5",
            "500ms",
            "2h",
            "30min",
            "1d",
            "2w",
            "05:30",
            "1:02:03",
            "2-12",
            "2-12:30",
            "2-12:30:45",
            " 3m ",
        ] {
            assert!(matches(DURATION, ok), "{ok:?} does not match");
            assert!(crate::quantity::parse_duration(ok).is_ok(), "{ok:?} matches the pattern but does not parse");
        }
        for no in ["", "abc", "1 h", "2-24", "5:60", "1h 2x"] {
            assert!(!matches(DURATION, no), "{no:?} matches");
            assert!(crate::quantity::parse_duration(no).is_err(), "{no:?} parses");
        }
    }

    #[test]
    fn text_refuses_controls_and_invisible_format_characters() {
        assert!(matches(TEXT, "ana-ml_team.1 é 東京"));
        for no in ["a\u{0}b", "a\nb", "a\u{85}b", "\u{202e}evil", "zero\u{200b}width", "\u{feff}bom"] {
            assert!(!matches(TEXT, no), "{no:?} matches");
        }
        assert!(matches(STATES, "pending,running") && matches(STATES, "active") && matches(STATES, ""));
        assert!(!matches(STATES, "up") && !matches(STATES, "pending;running") && !matches(STATES, "pendingstopping"));
        assert!(matches(REGISTRY, "ghcr.io") && matches(REGISTRY, "https://localhost:5000/"));
        assert!(!matches(REGISTRY, "a/b") && !matches(REGISTRY, " ") && !matches(REGISTRY, "x\u{99}"));
        assert!(matches(TOKEN_ID, "62a13a") && !matches(TOKEN_ID, "62a1") && !matches(TOKEN_ID, "xyzxyzxyz"));
        assert!(matches(ABSOLUTE_PATH, "/data") && !matches(ABSOLUTE_PATH, "data") && !matches(ABSOLUTE_PATH, ""));
    }
}
