//! `gpool registry login|list|logout`: your logins to image registries,
//! which the control plane hands only to your jobs' container runtime
//! (like `docker login`, but for jobs that run on other machines).

use std::io::Read;

use anyhow::{Context, bail};
use gpool_api as api;

use super::ListArgs;
use crate::client::Connect;
use crate::output::{emit, text};

/// `gpool registry login REGISTRY -u USER --password-stdin`.
#[derive(clap::Args, Debug)]
pub(crate) struct LoginArgs {
    /// The registry host, e.g. ghcr.io, nvcr.io, docker.io, localhost:5000.
    registry: String,
    #[arg(long, short = 'u')]
    username: String,
    /// Read the password (or token) from standard input; the only way, so it never shows in `ps` or a shell history.
    #[arg(long, required = true)]
    password_stdin: bool,
    #[command(flatten)]
    connect: Connect,
}

/// `gpool registry logout REGISTRY`.
#[derive(clap::Args, Debug)]
pub(crate) struct LogoutArgs {
    registry: String,
    #[command(flatten)]
    connect: Connect,
}

pub(crate) fn login(a: LoginArgs) -> anyhow::Result<()> {
    let mut password = String::new();
    std::io::stdin().read_to_string(&mut password).context("cannot read the password from standard input")?;
    let password = password.trim_end_matches(['\n', '\r']).to_string();
    if password.is_empty() {
        bail!(
            "no password on standard input: echo \"$TOKEN\" | gpool registry login {} -u {} --password-stdin",
            a.registry,
            a.username
        );
    }
    let req = api::RegistryLogin { username: a.username, password };
    let v: api::RegistryView = a.connect.client()?.put(&format!("/registries/{}", a.registry), &req)?;
    emit(&format!("stored your login to {} (as {}); your jobs in its images pull with it\n", v.registry, v.username));
    Ok(())
}

pub(crate) fn logout(a: LogoutArgs) -> anyhow::Result<()> {
    let v: api::RegistryView = a.connect.client()?.delete(&format!("/registries/{}", a.registry))?;
    emit(&format!("forgot your login to {}\n", v.registry));
    Ok(())
}

pub(crate) fn list(a: ListArgs) -> anyhow::Result<()> {
    let list: Vec<api::RegistryView> = a.connect.client()?.get("/registries")?;
    if a.output.is_data() {
        emit(&a.output.data(&list)?);
        return Ok(());
    }
    if list.is_empty() {
        emit("no registry logins: gpool registry login REGISTRY -u USER --password-stdin\n");
        return Ok(());
    }
    let mut lines = vec![format!("{:<32} {}", "REGISTRY", "USERNAME")];
    lines.extend(list.iter().map(|r| format!("{:<32} {}", r.registry, r.username)));
    emit(&text(lines));
    Ok(())
}
