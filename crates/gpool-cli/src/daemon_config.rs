//! `gpool up | serve | agent --config FILE`: every flag of the daemon in a
//! TOML file, for systemd units and configuration management.
//!
//! A key is a flag's long name without its dashes (`listen`, `gpu-price`;
//! `gpu_price` too). A value is what the flag takes: a string or a number;
//! `true` for a switch; a list for a flag given several times. The file is
//! read before clap parses the command line, and each of its settings
//! becomes the flag it names, unless the command line gives that flag or
//! the flag's environment variable is set: flags win over the environment,
//! which wins over the file. So clap checks every value exactly as it checks
//! a typed flag, and no setting exists only in one of the two places.

use std::ffi::OsString;
use std::path::Path;

use anyhow::{Context, bail};
use clap::{Arg, ArgAction, Command};

/// The verbs that take `--config`.
const DAEMONS: [&str; 3] = ["up", "serve", "agent"];

/// `argv` with the settings of the `--config` file of `gpool up|serve|agent`
/// put in as flags after the verb; `argv` itself when there is none.
pub(crate) fn expand(cli: &Command, argv: Vec<OsString>) -> anyhow::Result<Vec<OsString>> {
    let Some(verb_at) = argv.iter().skip(1).position(|a| !a.to_string_lossy().starts_with('-')).map(|i| i + 1) else {
        return Ok(argv);
    };
    let verb = argv[verb_at].to_string_lossy().to_string();
    let Some(command) = cli.find_subcommand(&verb).filter(|_| DAEMONS.contains(&verb.as_str())) else {
        return Ok(argv);
    };
    let Some(path) = config_path(&argv[verb_at + 1..]) else { return Ok(argv) };
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("cannot read --config {}", path.to_string_lossy()))?;
    let flags = flags_of(command, &text, Path::new(&path), &argv[verb_at + 1..])?;
    let mut out = argv[..=verb_at].to_vec();
    out.extend(flags);
    out.extend_from_slice(&argv[verb_at + 1..]);
    Ok(out)
}

/// The value of `--config FILE` or `--config=FILE`.
fn config_path(args: &[OsString]) -> Option<OsString> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let s = a.to_string_lossy();
        if s == "--" {
            return None;
        }
        if s == "--config" {
            return it.next().cloned();
        }
        if let Some(v) = s.strip_prefix("--config=") {
            return Some(v.into());
        }
    }
    None
}

/// The flags a config file's text stands for, for `command`, leaving out
/// those that `given` (the command line) or the environment set.
fn flags_of(command: &Command, text: &str, path: &Path, given: &[OsString]) -> anyhow::Result<Vec<OsString>> {
    let table: toml::Table = toml::from_str(text)
        .map_err(|e| anyhow::anyhow!("--config {}: {}", path.display(), e.to_string().trim_end()))?;
    let verb = command.get_name();
    let mut flags = Vec::new();
    for (key, value) in &table {
        let long = key.replace('_', "-");
        let Some(arg) = command.get_arguments().find(|a| a.get_long() == Some(long.as_str()) && long != "config")
        else {
            bail!(
                "--config {}: line {}: `{key}` is not a flag of `gpool {verb}`; the keys are its flags without the dashes: {}",
                path.display(),
                line_of(text, key),
                known_keys(command).join(", ")
            );
        };
        if is_given(arg, given) || arg.get_env().is_some_and(|e| std::env::var_os(e).is_some()) {
            continue;
        }
        let at = || format!("--config {}: line {}: `{key}`", path.display(), line_of(text, key));
        match (arg.get_action(), value) {
            (ArgAction::SetTrue, toml::Value::Boolean(on)) => {
                if *on {
                    flags.push(format!("--{long}").into());
                }
            }
            (ArgAction::SetTrue, other) => {
                bail!("{}: is a switch: write true or false, not {}", at(), other.type_str())
            }
            (ArgAction::Append, toml::Value::Array(items)) => {
                for item in items {
                    flags.push(format!("--{long}").into());
                    flags.push(scalar(item).with_context(at)?.into());
                }
            }
            (_, toml::Value::Array(_)) => bail!("{}: takes one value, not a list", at()),
            (_, v) => {
                flags.push(format!("--{long}").into());
                flags.push(scalar(v).with_context(at)?.into());
            }
        }
    }
    Ok(flags)
}

/// A string, number or date as the command line would spell it.
fn scalar(v: &toml::Value) -> anyhow::Result<String> {
    Ok(match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Datetime(d) => d.to_string(),
        toml::Value::Array(_) | toml::Value::Table(_) => bail!("a list or table where a value belongs"),
    })
}

/// Whether the command line gives `arg` (`--name`, `--name=…`, `-n`).
fn is_given(arg: &Arg, given: &[OsString]) -> bool {
    let long = arg.get_long().map(|l| format!("--{l}"));
    let short = arg.get_short().map(|s| format!("-{s}"));
    given.iter().take_while(|a| *a != "--").any(|a| {
        let a = a.to_string_lossy();
        long.as_deref().is_some_and(|l| a == l || a.starts_with(&format!("{l}=")))
            || short.as_deref().is_some_and(|s| a.starts_with(s))
    })
}

fn known_keys(command: &Command) -> Vec<String> {
    command
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter_map(Arg::get_long)
        .filter(|l| !matches!(*l, "config" | "help"))
        .map(str::to_string)
        .collect()
}

/// The line (1-based) a key is set on; 1 when it cannot be told.
fn line_of(text: &str, key: &str) -> usize {
    text.lines()
        .position(|l| l.trim_start().strip_prefix(key).is_some_and(|rest| rest.trim_start().starts_with('=')))
        .map_or(1, |i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn cli() -> Command {
        crate::Cli::command()
    }

    fn expand_with(text: &str, args: &[&str]) -> anyhow::Result<Vec<String>> {
        let dir = std::env::temp_dir().join(format!("gpool-daemon-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let file = dir.join(format!("{}.toml", args.join("_").replace(['/', '-', ' '], "")));
        std::fs::write(&file, text)?;
        let mut argv: Vec<OsString> = args.iter().map(OsString::from).collect();
        argv.extend(["--config".into(), file.clone().into_os_string()]);
        let out = expand(&cli(), argv);
        let _ = std::fs::remove_file(&file);
        Ok(out?.iter().map(|a| a.to_string_lossy().to_string()).collect())
    }

    #[test]
    fn settings_become_flags_that_the_command_line_overrides() {
        let text = "listen = \"0.0.0.0:9000\"\npolicy = \"fair\"\ngpu_price = [\"H100-80GB=2.5\", \"A100-80GB=1.5\"]\n";
        let argv = expand_with(text, &["gpool", "serve", "--policy", "fifo"]).expect("expands");
        let joined = argv.join(" ");
        assert!(joined.contains("--listen 0.0.0.0:9000"), "{joined}");
        assert!(joined.contains("--gpu-price H100-80GB=2.5 --gpu-price A100-80GB=1.5"), "{joined}");
        assert!(!joined.contains("fair"), "the command line's --policy wins: {joined}");
        let parsed = <crate::Cli as clap::Parser>::try_parse_from(&argv);
        assert!(parsed.is_ok(), "{:?}", parsed.err());
    }

    #[test]
    fn bad_files_are_refused_with_the_key_and_line() {
        let err =
            expand_with("listen = \"127.0.0.1:1\"\nlisten-port = 9\n", &["gpool", "up"]).expect_err("unknown key");
        let msg = format!("{err:#}");
        assert!(msg.contains("listen-port") && msg.contains("line 2") && msg.contains("policy"), "{msg}");
        let msg = format!("{:#}", expand_with("listen = [\"a\", \"b\"]\n", &["gpool", "up"]).expect_err("list"));
        assert!(msg.contains("one value"), "{msg}");
        let msg = format!("{:#}", expand_with("listen = \n", &["gpool", "up"]).expect_err("syntax"));
        assert!(msg.contains("--config"), "{msg}");
    }

    #[test]
    fn other_verbs_and_no_config_leave_argv_alone() {
        let argv: Vec<OsString> = ["gpool", "queue", "--config", "x"].iter().map(OsString::from).collect();
        assert_eq!(expand(&cli(), argv.clone()).expect("untouched"), argv);
        let argv: Vec<OsString> = ["gpool", "up"].iter().map(OsString::from).collect();
        assert_eq!(expand(&cli(), argv.clone()).expect("untouched"), argv);
    }
}
