//! `tokentrace diff`.

use std::process::ExitCode;

/// Arguments of `tokentrace diff`.
#[derive(clap::Args)]
pub struct Args {}

/// Runs `tokentrace diff`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`tokentrace diff` is not available yet")
}
