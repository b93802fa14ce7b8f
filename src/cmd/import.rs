//! `tokentrace import`: turns another tool's raw export into a trace.

use anyhow::Context;
use std::path::PathBuf;
use std::process::ExitCode;
use tokentrace_import::SourceKind;

/// Problems listed on stderr before the rest are summarized in one line.
const SHOWN_ISSUES: usize = 20;

/// Arguments of `tokentrace import`.
#[derive(clap::Args)]
pub struct Args {
    /// What INPUT is: `aiperf` (an AIPerf artifact directory) or `vllm` (the JSON of
    /// `vllm bench serve --save-result --save-detailed`).
    #[arg(value_parser = parse_kind)]
    pub kind: SourceKind,
    /// The export to read.
    pub input: PathBuf,
    /// The trace to write.
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
}

fn parse_kind(s: &str) -> Result<SourceKind, String> {
    s.parse()
}

/// Runs `tokentrace import`: exit 0 when everything was imported, 1 when some items were
/// skipped (each is listed with its file, line and field), 2 on failure.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut imported = tokentrace_import::read(args.kind, &args.input)
        .with_context(|| format!("importing {} as {}", args.input.display(), args.kind.name()))?;
    imported.manifest.argv = std::env::args().collect();
    let summary = tokentrace_import::write(imported, &args.output)
        .with_context(|| format!("writing {}", args.output.display()))?;
    for issue in summary.issues.iter().take(SHOWN_ISSUES) {
        eprintln!("warning: {issue}");
    }
    if summary.issues.len() > SHOWN_ISSUES {
        eprintln!(
            "warning: … and {} more problems",
            summary.issues.len() - SHOWN_ISSUES
        );
    }
    println!(
        "imported {} requests, {} chunks from {} into {}{}",
        summary.requests,
        summary.chunks,
        args.input.display(),
        summary.trace.display(),
        if summary.issues.is_empty() {
            String::new()
        } else {
            format!(" ({} problems, listed above)", summary.issues.len())
        }
    );
    Ok(if summary.issues.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
