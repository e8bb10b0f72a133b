//! YAML in and out, for every crate of gpool: specs and settings files,
//! request bodies sent as `application/yaml`, and `-o yaml`.
//!
//! The parser is serde-saphyr: pure Rust, no unsafe code, and every read is
//! held to its budget (at most 64 levels deep, 250,000 nodes, 1,000,000
//! events, 50,000 aliases, and aliases replayed at most so often), so a
//! body from the network cannot exhaust memory with anchors and aliases
//! (the "billion laughs") nor the stack with nesting. Errors say what is
//! wrong and where (line and column), on one line, without a snippet of
//! the input.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// What is wrong with a YAML text, or why a value could not be written as YAML.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct YamlError(String);

impl YamlError {
    fn read(e: &serde_saphyr::Error) -> YamlError {
        let options = serde_saphyr::render_options! { snippets: serde_saphyr::SnippetMode::Off };
        YamlError(e.render_with_options(options).trim().replace('\n', "; "))
    }
}

/// How text is read where no type is fixed (a command's arguments, matrix
/// values, a body read as a JSON value first): YAML 1.2's core schema, as
/// serde_yaml read it before. Only `true` and `false` are booleans (`yes`,
/// `no`, `on`, `off`, `y`, `n` stay text: `command: [echo, yes]` prints
/// "yes"), and `0755` and `1_000` stay text, not 755 and 1000.
fn options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        strict_booleans: true,
        leading_zero_numbers_as_strings: true,
        underscored_numbers_as_strings: true,
    }
}

/// One YAML document as `T`.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, YamlError> {
    serde_saphyr::from_str_with_options(text, options()).map_err(|e| YamlError::read(&e))
}

/// One YAML document, in UTF-8 bytes, as `T`.
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, YamlError> {
    serde_saphyr::from_slice_with_options(bytes, options()).map_err(|e| YamlError::read(&e))
}

/// `value` as a YAML document.
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> Result<String, YamlError> {
    serde_saphyr::to_string(&value).map_err(|e| YamlError(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq, Serialize)]
    #[serde(deny_unknown_fields)]
    struct Spec {
        name: String,
        gpus: u32,
        #[serde(default)]
        tags: Vec<String>,
    }

    #[test]
    fn a_document_reads_and_writes_back() {
        let s: Spec = from_str("name: train\ngpus: 2\ntags: [a, b]\n").unwrap();
        assert_eq!(s, Spec { name: "train".into(), gpus: 2, tags: vec!["a".into(), "b".into()] });
        let again: Spec = from_str(&to_string(&s).unwrap()).unwrap();
        assert_eq!(again, s);
        let bytes: Spec = from_slice(b"{name: x, gpus: 0}").unwrap();
        assert_eq!(bytes.gpus, 0);
    }

    #[test]
    fn only_true_and_false_are_booleans_and_numbers_with_zeros_or_underscores_stay_text() {
        let v: serde_json::Value = from_str("[echo, yes, n, on, OFF, 0755, 1_000, true, 12, 1.5]").unwrap();
        assert_eq!(v, serde_json::json!(["echo", "yes", "n", "on", "OFF", "0755", "1_000", true, 12, 1.5]));
        let env: std::collections::BTreeMap<String, String> = from_str("{WANDB_SILENT: yes, MODE: 0755}").unwrap();
        assert_eq!(env["WANDB_SILENT"], "yes");
        assert_eq!(env["MODE"], "0755");
    }

    #[test]
    fn errors_name_the_field_and_the_place_on_one_line() {
        let e = from_str::<Spec>("name: train\ngpus: 2\ncolour: red\n").unwrap_err().to_string();
        assert!(e.contains("colour") && !e.contains('\n'), "{e}");
        let e = from_str::<Spec>("name: train\ngpus: many\n").unwrap_err().to_string();
        assert!(e.contains("line 2") || e.contains("2:"), "where: {e}");
        assert!(from_str::<Spec>("name: [unclosed\n").is_err());
    }

    #[test]
    fn alias_bombs_and_deep_nesting_are_refused_not_expanded() {
        // Nine levels of ten aliases each: 10^9 strings if expanded.
        let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for (prev, next) in
            ["a", "b", "c", "d", "e", "f", "g", "h"].iter().zip(["b", "c", "d", "e", "f", "g", "h", "i"])
        {
            let p = format!("*{prev}");
            bomb.push_str(&format!("{next}: &{next} [{}]\n", [p.as_str(); 10].join(", ")));
        }
        let e = from_str::<serde_json::Value>(&bomb).expect_err("expanded a billion laughs").to_string();
        assert!(e.contains("alias") || e.contains("budget"), "refused for its aliases: {e}");
        let deep = format!("{}1{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(from_str::<serde_json::Value>(&deep).is_err(), "10,000 levels of nesting");
    }
}
