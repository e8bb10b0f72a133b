//! What the API accepts at its boundary, beyond the shape serde checks:
//! text that can be shown and passed on safely, and commands the kernel can
//! actually run.
//!
//! - Names (user, team, queue, job name, label and selector keys and
//!   values, env names, the working directory) hold no control character:
//!   a NUL cannot reach the kernel, and an escape sequence printed by
//!   `gpool queue` would drive the terminal of whoever reads it.
//! - Command arguments and env values may hold tabs and line breaks (shell
//!   scripts, PEM keys in the environment), no other control character.
//! - Each argument or env entry is at most 128 KiB, the kernel's
//!   `MAX_ARG_STRLEN`, and all of them together at most 1 MiB, half the
//!   usual `ARG_MAX` (the node adds its own environment): a command the
//!   kernel would refuse is refused at submission, not accepted and then
//!   failed with exit 127.

use gpool_api::spec::Command;

/// The kernel's limit on one argument or `NAME=value` entry (32 pages, NUL included).
pub const MAX_ARG_BYTES: usize = 128 * 1024 - 1;
/// The most a job's arguments and environment may hold together.
pub const MAX_ARGS_TOTAL: usize = 1024 * 1024;
/// The longest name (user, team, queue, job name, label key or value).
pub const MAX_NAME: usize = 253;

/// A field that is wrong at the boundary: its path and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub field: String,
    pub message: String,
}

fn refused(field: impl Into<String>, message: impl Into<String>) -> Refused {
    Refused { field: field.into(), message: message.into() }
}

/// The first control character of `s`, if any, allowing `\t`, `\n`, `\r` when `multiline`.
fn control(s: &str, multiline: bool) -> Option<char> {
    s.chars().find(|c| c.is_control() && !(multiline && matches!(c, '\t' | '\n' | '\r')))
}

/// A name: not empty, at most [`MAX_NAME`] bytes, no control character.
pub fn name(field: &str, s: &str) -> Result<(), Refused> {
    if s.trim().is_empty() {
        return Err(refused(field, "must not be empty"));
    }
    if s.len() > MAX_NAME {
        return Err(refused(field, format!("is {} bytes long; the most is {MAX_NAME}", s.len())));
    }
    text(field, s)
}

/// Text shown or passed on as it is: no control character.
pub fn text(field: &str, s: &str) -> Result<(), Refused> {
    match control(s, false) {
        Some(c) => Err(refused(field, format!("contains the control character {:?}; remove it", c))),
        None => Ok(()),
    }
}

/// A name that is also an identity (a token's user or team): no spaces either.
pub fn identity(field: &str, s: &str) -> Result<(), Refused> {
    name(field, s)?;
    if s.contains(char::is_whitespace) {
        return Err(refused(field, "must not contain spaces"));
    }
    Ok(())
}

/// The most retries a job may ask for (Kubernetes' `backoffLimit` is 6 by
/// default; a job failing more than this is failing for a reason).
pub const MAX_RETRIES: u32 = 100;

/// The text fields of a job spec (everything but its numbers and durations),
/// and the numbers that have a limit of their own.
pub fn spec(s: &gpool_api::JobSpec) -> Result<(), Refused> {
    if s.retries > MAX_RETRIES {
        return Err(refused("retries", format!("{} is more than the most, {MAX_RETRIES}", s.retries)));
    }
    if let Some(n) = &s.name {
        name("name", n)?;
    }
    if let Some(q) = &s.queue {
        name("queue", q)?;
    }
    if let Some(w) = &s.workdir {
        text("workdir", w)?;
    }
    if let Some(m) = &s.gpu_model {
        text("gpuModel", m)?;
    }
    if let Some(i) = &s.image {
        let ok = !i.is_empty()
            && i.len() <= 512
            && !i.starts_with('-')
            && i.chars().all(|c| c.is_ascii_alphanumeric() || "._-/:@+".contains(c));
        if !ok {
            return Err(refused(
                "image",
                format!("{i:?} is not an image reference such as pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"),
            ));
        }
    }
    for (field, map) in [("labels", &s.labels), ("nodeSelector", &s.node_selector)] {
        for (k, v) in map {
            name(&format!("{field} key"), k)?;
            text(&format!("{field}.{k}"), v)?;
        }
    }
    let mut total = 0usize;
    let argv: Vec<&str> = match &s.command {
        Command::Argv(a) => a.iter().map(String::as_str).collect(),
        Command::Shell(line) => vec![line.as_str()],
    };
    for (i, a) in argv.iter().enumerate() {
        let field = format!("command[{i}]");
        if let Some(c) = control(a, true) {
            return Err(refused(field, format!("contains the control character {c:?}; remove it")));
        }
        if a.len() > MAX_ARG_BYTES {
            return Err(refused(field, format!("is {} bytes; the kernel takes at most {MAX_ARG_BYTES}", a.len())));
        }
        total += a.len() + 1;
    }
    for (k, v) in &s.env {
        let field = format!("env.{k}");
        if k.is_empty() || k.contains('=') || control(k, false).is_some() {
            return Err(refused("env", format!("{k:?} is not a variable name (no '=', no control character)")));
        }
        if let Some(c) = control(v, true) {
            return Err(refused(field, format!("contains the control character {c:?}; remove it")));
        }
        let entry = k.len() + 1 + v.len();
        if entry > MAX_ARG_BYTES {
            return Err(refused(field, format!("is {entry} bytes; the kernel takes at most {MAX_ARG_BYTES}")));
        }
        total += entry + 1;
    }
    if total > MAX_ARGS_TOTAL {
        return Err(refused(
            "command",
            format!("the command and env hold {total} bytes together; the most is {MAX_ARGS_TOTAL}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(yaml: &str) -> gpool_api::JobSpec {
        serde_yaml_ng::from_str(yaml).expect("a spec")
    }

    #[test]
    fn control_characters_and_oversized_commands_are_refused_naming_the_field() {
        let cases: &[(&str, Option<&str>)] = &[
            ("command: [echo, hi]\nname: ok\n", None),
            ("command: \"echo a\\necho b\"\n", None),
            ("command: [echo]\nenv: {KEY: \"line1\\nline2\"}\n", None),
            ("command: [echo]\nname: \"x\\u001b[31m\"\n", Some("name")),
            ("command: [echo]\nqueue: \"a\\u0000\"\n", Some("queue")),
            ("command: [\"a\\u0000b\"]\n", Some("command[0]")),
            ("command: [echo]\nlabels: {team: \"x\\u0007\"}\n", Some("labels.team")),
            ("command: [echo]\nenv: {KEY: \"\\u001b\"}\n", Some("env.KEY")),
            ("command: [echo]\nname: \"  \"\n", Some("name")),
        ];
        for (yaml, field) in cases {
            let got = spec(&job(yaml)).err().map(|r| r.field);
            assert_eq!(got.as_deref(), *field, "{yaml}");
        }
        let long = job(&format!("command: [echo, {}]\n", "x".repeat(MAX_ARG_BYTES + 1)));
        assert_eq!(spec(&long).map_err(|r| r.field), Err("command[1]".to_string()));
        let many = job(&format!(
            "command: [echo]\nenv: {{{}}}\n",
            (0..10).map(|i| format!("K{i}: {}", "y".repeat(120_000))).collect::<Vec<_>>().join(", ")
        ));
        assert_eq!(spec(&many).map_err(|r| r.field), Err("command".to_string()));
    }
}
