//! `tokentrace record`.

use std::process::ExitCode;

/// Arguments of `tokentrace record`.
#[derive(clap::Args)]
pub struct Args {}

/// Runs `tokentrace record`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`tokentrace record` is not available yet")
}
