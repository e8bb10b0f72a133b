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
/// The longest name in characters (user, team, queue, job name, label key or value).
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

/// A name: not empty, at most [`MAX_NAME`] characters, no control character.
pub fn name(field: &str, s: &str) -> Result<(), Refused> {
    if s.trim().is_empty() {
        return Err(refused(field, "must not be empty"));
    }
    let chars = s.chars().count();
    if chars > MAX_NAME {
        return Err(refused(field, format!("is {chars} characters long; the most is {MAX_NAME}")));
    }
    text(field, s)
}

/// Text shown or passed on as it is: no control character, and no
/// invisible format character that reorders or hides what a terminal shows
/// (bidi overrides and isolates such as U+202E, zero-width characters).
pub fn text(field: &str, s: &str) -> Result<(), Refused> {
    if let Some(c) = control(s, false) {
        return Err(refused(field, format!("contains the control character {:?}; remove it", c)));
    }
    if let Some(c) = s.chars().find(|c| format_char(*c)) {
        return Err(refused(
            field,
            format!("contains the invisible format character U+{:04X}, which can disguise text; remove it", c as u32),
        ));
    }
    Ok(())
}

/// Unicode's format characters (category Cf) that change how text reads
/// without showing: bidi embeddings, overrides, isolates and marks; zero-width
/// spaces and joiners; the soft hyphen; the byte-order mark; tag characters.
pub fn format_char(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{061C}' | '\u{180E}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{2069}' | '\u{206A}'..='\u{206F}' | '\u{FEFF}' | '\u{FFF9}'..='\u{FFFB}'
        | '\u{E0000}'..='\u{E007F}')
}

/// A name that is also an identity (a token's user or team): no spaces either.
pub fn identity(field: &str, s: &str) -> Result<(), Refused> {
    name(field, s)?;
    if s.contains(char::is_whitespace) {
        return Err(refused(field, "must not contain spaces"));
    }
    Ok(())
}

/// An image named as a registry holds it: `[HOST[:PORT]/]PATH[:TAG][@DIGEST]`.
/// Refused: other transports (`docker-archive:/path`, `oci-archive:`,
/// `dir:`, `containers-storage:`…), which the node's root runtime would
/// open with root's rights, and bare image ids, which would run whatever
/// another user left in the node's store (docs/containers.md).
pub fn image_reference(i: &str) -> Result<(), String> {
    let example = "such as pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime or registry.example.com:5000/team/train:v3";
    let ok_chars = !i.is_empty()
        && i.len() <= 512
        && !i.starts_with('-')
        && i.chars().all(|c| c.is_ascii_alphanumeric() || "._-/:@+".contains(c));
    if !ok_chars {
        return Err(format!("{i:?} is not an image reference {example}"));
    }
    // containers-image's transports; podman takes `TRANSPORT:…` for one before any registry name.
    const TRANSPORTS: &[&str] = &[
        "docker-archive",
        "oci-archive",
        "oci",
        "dir",
        "containers-storage",
        "docker-daemon",
        "docker",
        "sif",
        "tarball",
        "ostree",
    ];
    if i.split_once(':').is_some_and(|(t, _)| TRANSPORTS.contains(&t.to_ascii_lowercase().as_str())) {
        return Err(format!(
            "{i:?} names a transport, not a registry's image: transports such as docker-archive:, oci-archive: or \
             dir: would be opened by the node's root runtime and are refused; push the image to a registry and \
             name it there, {example}"
        ));
    }
    let (rest, digest) = match i.split_once('@') {
        Some((r, d)) => (r, Some(d)),
        None => (i, None),
    };
    if let Some(d) = digest {
        let valid = d.split_once(':').is_some_and(|(algo, hex)| {
            !algo.is_empty()
                && algo.chars().all(|c| c.is_ascii_alphanumeric())
                && hex.len() >= 32
                && hex.chars().all(|c| c.is_ascii_hexdigit())
        });
        if !valid {
            return Err(format!("{i:?}: the digest after '@' must be ALGORITHM:HEX, such as sha256:…"));
        }
    }
    if rest.is_empty() {
        return Err(format!("{i:?} names no repository; images are named by repository {example}"));
    }
    // A tag follows the last ':' that comes after the last '/'.
    let last_slash = rest.rfind('/').map_or(0, |p| p + 1);
    let (name, tag) = match rest[last_slash..].rfind(':') {
        Some(p) => (&rest[..last_slash + p], Some(&rest[last_slash + p + 1..])),
        None => (rest, None),
    };
    if tag.is_some_and(|t| t.is_empty() || t.len() > 128 || t.starts_with(['.', '-'])) {
        return Err(format!("{i:?}: the tag after ':' must be 1 to 128 letters, digits, '_', '.' or '-'"));
    }
    let parts: Vec<&str> = name.split('/').collect();
    let host = parts.len() > 1 && (parts[0].contains(['.', ':']) || parts[0] == "localhost");
    for (n, part) in parts.iter().enumerate() {
        let valid = if n == 0 && host {
            let (h, port) = part.split_once(':').unwrap_or((part, "1"));
            !h.is_empty() && !h.contains(':') && !port.is_empty() && port.chars().all(|c| c.is_ascii_digit())
        } else {
            !part.is_empty() && !part.contains(':') && !part.contains('@')
        };
        if !valid {
            return Err(format!("{i:?} is not an image reference {example}"));
        }
    }
    let bare_id = parts.len() == 1 && tag.is_none() && name.len() >= 6 && name.chars().all(|c| c.is_ascii_hexdigit());
    if bare_id || name.starts_with("sha256") {
        return Err(format!(
            "{i:?} looks like an image id; images are named by repository and tag ({example}), so that a job \
             never runs an image another user left on the node"
        ));
    }
    Ok(())
}

/// An image archive on the node named by absolute path (`docker-archive:`
/// or `oci-archive:`), which only an admin may run: the node's root runtime
/// opens it with root's rights (registry-free sites and the tests use it).
pub fn admin_archive(i: &str) -> bool {
    ["docker-archive:/", "oci-archive:/"].iter().any(|t| i.starts_with(t))
        && !i.contains("/../")
        && i.chars().all(|c| c.is_ascii_alphanumeric() || "._-/:@+".contains(c))
}

/// The most retries a job may ask for (Kubernetes' `backoffLimit` is 6 by
/// default; a job failing more than this is failing for a reason).
pub const MAX_RETRIES: u32 = 100;

/// The text fields of a job spec (everything but its numbers and durations),
/// and the numbers that have a limit of their own.
/// `admin`: the caller is an admin, who may also name a local archive
/// (`docker-archive:/path`, `oci-archive:/path`: [`admin_archive`]).
pub fn spec(s: &gpool_api::JobSpec, admin: bool) -> Result<(), Refused> {
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
    if let Some(i) = &s.image
        && !(admin && admin_archive(i))
    {
        image_reference(i).map_err(|why| refused("image", why))?;
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
        gpool_api::yaml::from_str(yaml).expect("a spec")
    }

    #[test]
    fn images_are_named_by_registry_reference_never_by_path_transport_or_id() {
        let cases: &[(&str, Option<&str>)] = &[
            ("pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime", None),
            ("busybox", None),
            ("localhost/gpool-probe:1", None),
            ("registry.example.com:5000/team/train:v3", None),
            ("ghcr.io/org/img@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", None),
            ("docker-archive:/home/bob/private.tar", Some("transport")),
            ("oci-archive:x.tar", Some("transport")),
            ("dir:/srv/img", Some("transport")),
            ("containers-storage:busybox", Some("transport")),
            ("docker://busybox", Some("transport")),
            ("3f2a1b9c8d7e", Some("image id")),
            ("sha256:3f2a1b9c8d7e3f2a1b9c8d7e3f2a1b9c8d7e", Some("image id")),
            ("img@md5:12", Some("digest")),
            ("host:notaport/x", Some("not an image reference")),
            ("-privileged", Some("not an image reference")),
            ("a b", Some("not an image reference")),
            ("", Some("not an image reference")),
        ];
        for (image, want) in cases {
            match (image_reference(image), want) {
                (Ok(()), None) => {}
                (Err(why), Some(w)) => assert!(why.contains(w), "{image}: {why}"),
                (got, want) => panic!("{image}: got {got:?}, wanted {want:?}"),
            }
        }
    }

    #[test]
    fn only_an_admin_may_name_an_archive_on_the_node() {
        let spec = job("command: [\"true\"]\nimage: docker-archive:/srv/images/x.tar\n");
        assert_eq!(super::spec(&spec, false).map_err(|r| r.field), Err("image".to_string()));
        assert!(super::spec(&spec, true).is_ok());
        let sneaky = job("command: [\"true\"]\nimage: dir:/root\n");
        assert!(super::spec(&sneaky, true).is_err(), "only the archive transports, even for admins");
    }

    #[test]
    fn bidi_overrides_and_invisible_characters_are_refused_in_names() {
        for bad in ["evil\u{202E}gnp.exe", "a\u{200B}b", "x\u{2066}y", "\u{FEFF}bom"] {
            let e = name("name", bad).expect_err(bad);
            assert!(e.message.contains("format character U+"), "{e:?}");
        }
        assert!(name("name", "résumé-训练-🚀").is_ok(), "ordinary text outside ASCII is fine");
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
            let got = spec(&job(yaml), false).err().map(|r| r.field);
            assert_eq!(got.as_deref(), *field, "{yaml}");
        }
        let long = job(&format!("command: [echo, {}]\n", "x".repeat(MAX_ARG_BYTES + 1)));
        assert_eq!(spec(&long, false).map_err(|r| r.field), Err("command[1]".to_string()));
        let many = job(&format!(
            "command: [echo]\nenv: {{{}}}\n",
            (0..10).map(|i| format!("K{i}: {}", "y".repeat(120_000))).collect::<Vec<_>>().join(", ")
        ));
        assert_eq!(spec(&many, false).map_err(|r| r.field), Err("command".to_string()));
    }
}
