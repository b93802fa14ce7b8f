//! `tokentrace redact IN OUT`: a shareable copy of a trace. Chunk text and raw payloads are
//! removed, response header values other than timings and ids are replaced, and (with
//! `--strip-errors`) error texts too; every timestamp, length, hash, count and outcome stays.
//! docs/RELIABILITY.md lists exactly what is kept.

use anyhow::{bail, Context};
use std::path::PathBuf;
use std::process::ExitCode;
use tokentrace_format::redact::{damage, redact_trace, RedactOptions};

/// Arguments of `tokentrace redact`.
#[derive(clap::Args)]
pub struct Args {
    /// The trace to read.
    pub input: PathBuf,
    /// The redacted trace to write (must not exist unless --force).
    pub output: PathBuf,
    /// Also replace error texts (they may quote a server's error body) by `<redacted>`.
    #[arg(long)]
    pub strip_errors: bool,
    /// Overwrite the output if it exists.
    #[arg(long)]
    pub force: bool,
    /// Copy a damaged trace too (what can be read; the copy records the damage). Without it a
    /// damaged input is refused with exit status 1 and nothing is written.
    #[arg(long)]
    pub allow_damage: bool,
}

/// Runs `tokentrace redact`. Exit status 0 when every block was copied, 1 when damaged blocks of
/// the input had to be left out (the output is still a valid trace).
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.output.exists() && !args.force {
        bail!(
            "{} exists; pass --force to overwrite it",
            args.output.display()
        );
    }
    if !args.allow_damage {
        let reader = tokentrace_format::TraceReader::open(&args.input)
            .with_context(|| format!("cannot read {}", args.input.display()))?;
        if let Some(damage) = damage(&reader) {
            eprintln!(
                "error: {} is damaged ({damage}); nothing written. Give --allow-damage to copy \
                 what can be read (the copy records the damage).",
                args.input.display()
            );
            return Ok(ExitCode::from(1));
        }
    }
    let options = RedactOptions {
        strip_errors: args.strip_errors,
    };
    let stats = redact_trace(&args.input, &args.output, options).with_context(|| {
        format!(
            "cannot redact {} into {}",
            args.input.display(),
            args.output.display()
        )
    })?;
    println!(
        "redacted {} requests into {}: {} chunk texts, {} header values, {} error texts removed",
        stats.requests,
        args.output.display(),
        stats.texts_removed,
        stats.header_values_removed,
        stats.errors_removed,
    );
    if stats.blocks_skipped > 0 {
        eprintln!(
            "warning: {} damaged block(s) of {} could not be read and are not in the copy \
             (its manifest and run end say so)",
            stats.blocks_skipped,
            args.input.display()
        );
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
