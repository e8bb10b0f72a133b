//! `-o json|yaml`, and `--json`, as the gpool CLI spells them (docs/cli.md).

use serde_json::Value;

/// How a result is printed.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    /// For people: a report, or indented JSON where a command has no other.
    Table,
    Json,
    Yaml,
}

/// The output flags a command takes.
#[derive(clap::Args, Clone, Copy, Debug, Default)]
pub(crate) struct Print {
    /// How the result is printed: table, json or yaml (as in the gpool CLI).
    #[arg(long, short = 'o', value_enum, conflicts_with = "json")]
    output: Option<Format>,
    /// Print the result as JSON (the same as `-o json`).
    #[arg(long)]
    json: bool,
}

impl Print {
    /// The data format asked for; `None` for the table.
    pub(crate) fn data(self) -> Option<Format> {
        match self.output {
            Some(Format::Table) => None,
            Some(f) => Some(f),
            None => self.json.then_some(Format::Json),
        }
    }

    /// `v` as asked for: one line of JSON, YAML, or (for the table) indented JSON.
    pub(crate) fn render(self, v: &Value) -> anyhow::Result<String> {
        Ok(match self.data() {
            Some(Format::Json) => v.to_string(),
            Some(Format::Yaml) => gpool_api::yaml::to_string(v)?.trim_end().to_string(),
            _ => serde_json::to_string_pretty(v)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        print: Print,
    }

    #[test]
    fn o_json_is_json_and_o_yaml_the_same_data() {
        let v = serde_json::json!({"ok": true, "runs": [1, 2]});
        let parse = |args: &[&str]| Cmd::try_parse_from([&["x"], args].concat()).map(|c| c.print);
        let json = parse(&["-o", "json"]).expect("-o json");
        assert_eq!(json.render(&v).expect("json"), r#"{"ok":true,"runs":[1,2]}"#);
        assert_eq!(parse(&["--json"]).expect("--json").render(&v).expect("json"), json.render(&v).expect("json"));
        let yaml = parse(&["-o", "yaml"]).expect("-o yaml").render(&v).expect("yaml");
        let back: Value = gpool_api::yaml::from_str(&yaml).expect("YAML");
        assert_eq!(back, v);
        assert_eq!(parse(&[]).expect("none").data(), None);
        assert!(parse(&["--json", "-o", "yaml"]).is_err(), "one or the other");
    }
}
