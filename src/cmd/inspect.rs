//! `tokentrace inspect`.

use std::process::ExitCode;

/// Arguments of `tokentrace inspect`.
#[derive(clap::Args)]
pub struct Args {}

/// Runs `tokentrace inspect`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`tokentrace inspect` is not available yet")
}
