//! The CLI's configuration file: where the daemon is and which token to
//! use, so that neither has to be typed or exported in every shell.
//!
//! `$GPOOL_CONFIG`, else `$XDG_CONFIG_HOME/gpool/config.toml`, else
//! `~/.config/gpool/config.toml`. Flags and environment variables win over
//! it; it wins over finding a local daemon.
//!
//! ```toml
//! server = "https://gpool.example.com:7878"
//! token = "gp_…"
//! ca_file = "/etc/gpool/ca.pem"
//! output = "wide"   # table, wide, json or yaml: the default of -o
//! ```

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::ValueEnum as _;
use serde::Deserialize;

#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConfigFile {
    pub(crate) server: Option<String>,
    pub(crate) token: Option<String>,
    pub(crate) socket: Option<PathBuf>,
    pub(crate) ca_file: Option<PathBuf>,
    pub(crate) output: Option<crate::output::Output>,
}

/// The format when `-o` is not given: `$GPOOL_OUTPUT`, else the config
/// file's `output`, else a table. A bad value in either is not fatal here:
/// clap names a bad `$GPOOL_OUTPUT`, and the client a bad file.
pub(crate) fn default_output() -> crate::output::Output {
    if let Ok(v) = std::env::var("GPOOL_OUTPUT") {
        return crate::output::Output::from_str(&v, true).unwrap_or_default();
    }
    ConfigFile::load().ok().and_then(|c| c.output).unwrap_or_default()
}

/// Where the file is looked for.
pub(crate) fn path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("GPOOL_CONFIG") {
        return Some(PathBuf::from(p));
    }
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("gpool").join("config.toml"))
}

impl ConfigFile {
    /// The file's settings; none when there is no file. `$GPOOL_CONFIG`
    /// naming a file that is not there is an error (it was asked for).
    pub(crate) fn load() -> anyhow::Result<ConfigFile> {
        let Some(path) = path() else { return Ok(ConfigFile::default()) };
        match std::fs::read_to_string(&path) {
            Ok(text) => ConfigFile::parse(&text, &path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && std::env::var_os("GPOOL_CONFIG").is_none() => {
                Ok(ConfigFile::default())
            }
            Err(e) => Err(e).with_context(|| format!("cannot read the configuration file {}", path.display())),
        }
    }

    pub(crate) fn parse(text: &str, path: &Path) -> anyhow::Result<ConfigFile> {
        let cfg: ConfigFile = toml::from_str(text).map_err(|e| {
            anyhow::anyhow!(
                "{}: {} (keys: server, token, socket, ca_file, output; see docs/cli.md)",
                path.display(),
                e.to_string().trim_end()
            )
        })?;
        if cfg.token.is_some()
            && let Ok(meta) = std::fs::metadata(path)
            && meta.permissions().mode() & 0o077 != 0
        {
            eprintln!("warning: {} holds a token and others may read it: chmod 600 {}", path.display(), path.display());
        }
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_names_the_server_and_token_and_refuses_unknown_keys() {
        let p = Path::new("/nonexistent/config.toml");
        let cfg = ConfigFile::parse("server = \"http://10.0.0.1:7878\"\ntoken = \"gp_x\"\n", p).unwrap();
        assert_eq!(cfg.server.as_deref(), Some("http://10.0.0.1:7878"));
        assert_eq!(cfg.token.as_deref(), Some("gp_x"));
        let err = ConfigFile::parse("server = \"http://a\"\nsevrer = \"x\"\n", p).unwrap_err().to_string();
        assert!(err.contains("sevrer") && err.contains("line 2") && err.contains("/nonexistent/config.toml"), "{err}");
        let cfg = ConfigFile::parse("output = \"yaml\"\n", p).unwrap();
        assert_eq!(cfg.output, Some(crate::output::Output::Yaml));
        let err = ConfigFile::parse("output = \"xml\"\n", p).unwrap_err().to_string();
        assert!(err.contains("xml") && err.contains("json"), "{err}");
        let err = ConfigFile::parse("server = 7878\n", p).unwrap_err().to_string();
        assert!(err.contains("server"), "{err}");
    }
}
