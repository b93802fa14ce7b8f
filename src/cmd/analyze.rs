//! `tokentrace analyze`.

use std::process::ExitCode;

/// Arguments of `tokentrace analyze`.
#[derive(clap::Args)]
pub struct Args {}

/// Runs `tokentrace analyze`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`tokentrace analyze` is not available yet")
}
