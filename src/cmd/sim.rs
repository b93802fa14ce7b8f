//! `tokentrace sim`.

use std::process::ExitCode;

/// Arguments of `tokentrace sim`.
#[derive(clap::Args)]
pub struct Args {}

/// Runs `tokentrace sim`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`tokentrace sim` is not available yet")
}
