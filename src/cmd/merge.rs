//! `tokentrace merge`: the shard traces of one run as one trace (docs/SCALE.md).
//!
//! Exit status: 0 when every shard is present and finished, 1 when the merged run is partial
//! (shards missing or unfinished: what they recorded is kept and the run is labelled so).

use anyhow::bail;
use std::path::PathBuf;
use std::process::ExitCode;
use tokentrace_format::merge::merge_traces;

/// Arguments of `tokentrace merge`.
#[derive(clap::Args)]
pub struct Args {
    /// The shard traces (any order).
    #[arg(required = true)]
    pub shards: Vec<PathBuf>,
    /// The merged trace to write.
    #[arg(long, short = 'o')]
    pub output: PathBuf,
    /// The number of shards the run must have (its shards say how many it had; this checks
    /// that the set is the one you meant).
    #[arg(long, value_name = "N")]
    pub expect_shards: Option<u32>,
    /// Replace the output when it exists.
    #[arg(long)]
    pub force: bool,
}

/// Runs `tokentrace merge`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.output.exists() {
        if !args.force {
            bail!(
                "{} exists; pass --force to replace it",
                args.output.display()
            );
        }
        std::fs::remove_file(&args.output)?;
    }
    let stats = merge_traces(&args.shards, &args.output, args.expect_shards)?;
    let shards = &stats.shards;
    eprintln!(
        "merged {} requests ({} interrupted) into {}: {}{}",
        stats.requests,
        stats.interrupted,
        args.output.display(),
        shards.describe(),
        if shards.is_partial() {
            " (partial run)"
        } else {
            ""
        }
    );
    if stats.blocks_lost > 0 {
        eprintln!(
            "warning: {} damaged blocks of the shards could not be read; their requests are not in the merged trace",
            stats.blocks_lost
        );
    }
    Ok(if shards.is_partial() || stats.blocks_lost > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
