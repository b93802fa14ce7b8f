//! `tokentrace demo`.

use std::process::ExitCode;

/// Arguments of `tokentrace demo`.
#[derive(clap::Args)]
pub struct Args {}

/// Runs `tokentrace demo`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`tokentrace demo` is not available yet")
}
