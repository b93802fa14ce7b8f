//! `tokentrace protocols`.

use std::process::ExitCode;

/// Arguments of `tokentrace protocols`.
#[derive(clap::Args)]
pub struct Args {}

/// Runs `tokentrace protocols`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`tokentrace protocols` is not available yet")
}
