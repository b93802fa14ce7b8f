//! `tokentrace export`: traces in the formats other tools read (docs/EXPORT.md).

use anyhow::Context;
use std::path::PathBuf;
use std::process::ExitCode;
use tokentrace_analyzer::analysis::{self, Analysis};
use tokentrace_analyzer::dataset::Dataset;
use tokentrace_analyzer::facts::FactsOptions;
use tokentrace_analyzer::protocol::builtin;
use tokentrace_export::{parquet, perfetto};

/// Arguments of `tokentrace export`.
#[derive(clap::Args)]
pub struct Args {
    /// What to export to.
    #[command(subcommand)]
    pub target: Target,
}

/// The export formats.
#[derive(clap::Subcommand)]
pub enum Target {
    /// A Parquet dataset: DIR/requests.parquet (one row per request, with the protocol's
    /// per-request metrics) and DIR/chunks.parquet (one row per chunk).
    Parquet(ParquetArgs),
    /// A Chrome trace-event JSON timeline for ui.perfetto.dev: a track per request, an
    /// instant per chunk, counters of requests in flight and output throughput.
    Perfetto(PerfettoArgs),
}

/// Arguments of `tokentrace export parquet`.
#[derive(clap::Args)]
pub struct ParquetArgs {
    /// Trace files; their rows share the dataset, told apart by the run columns.
    #[arg(required = true)]
    pub traces: Vec<PathBuf>,
    /// Directory to write requests.parquet and chunks.parquet into (created when missing).
    #[arg(long, short = 'o', value_name = "DIR")]
    pub output: PathBuf,
    /// Protocol whose per-request metrics become columns (see `tokentrace protocols`).
    #[arg(long, short = 'p')]
    pub protocol: Option<String>,
    /// A TOML file defining a protocol (see docs/PROTOCOLS.md, "Your own protocol").
    #[arg(long)]
    pub protocol_file: Option<PathBuf>,
    /// Count warmup requests too (the `counted` column; every request is exported anyway).
    #[arg(long)]
    pub include_warmup: bool,
    /// Overwrite requests.parquet and chunks.parquet when they exist.
    #[arg(long)]
    pub force: bool,
    /// Threads decoding trace blocks (default: the available cores).
    #[arg(long)]
    pub threads: Option<usize>,
}

/// Arguments of `tokentrace export perfetto`.
#[derive(clap::Args)]
pub struct PerfettoArgs {
    /// Trace files, one process each on the timeline.
    #[arg(required = true)]
    pub traces: Vec<PathBuf>,
    /// The JSON file to write.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: PathBuf,
    /// Chunk instants written at most (whole requests, in file order, while they fit; the
    /// file's otherData says how many were left out). 0: none.
    #[arg(long, default_value_t = perfetto::Options::default().max_chunk_events)]
    pub max_chunk_events: u64,
    /// Width of the output-throughput counter's bins, in ms.
    #[arg(long, default_value_t = 100.0)]
    pub bin_ms: f64,
    /// One wall-clock time line for all traces (0 = the earliest trace's first send) instead
    /// of each trace starting at its own first send.
    #[arg(long)]
    pub wall_clock: bool,
    /// Overwrite the output file when it exists.
    #[arg(long)]
    pub force: bool,
    /// Threads decoding trace blocks (default: the available cores).
    #[arg(long)]
    pub threads: Option<usize>,
}

/// Runs `tokentrace export`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.target {
        Target::Parquet(args) => export_parquet(args),
        Target::Perfetto(args) => export_perfetto(args),
    }
}

fn export_parquet(args: ParquetArgs) -> anyhow::Result<ExitCode> {
    // Refuse before the traces are read: a refusal should cost nothing.
    parquet::check_outputs(&args.output, args.force)?;
    let protocol = builtin::resolve(args.protocol.as_deref(), args.protocol_file.as_deref())?;
    let options = super::analyze::options(&protocol, &[], args.include_warmup)?;
    let facts = FactsOptions {
        threads: args.threads.unwrap_or_else(super::analyze::default_threads),
        ..analysis::facts_options(&protocol, &options)
    };
    let dataset = load(&args.traces, facts)?;
    let all: Vec<u32> = (0..dataset.traces.len() as u32).collect();
    let analysis = Analysis::new(&protocol, &dataset, &all, &options);
    let written = parquet::export(&analysis, &args.output, args.force)
        .with_context(|| format!("exporting to {}", args.output.display()))?;
    println!(
        "wrote {} requests to {} and {} chunks to {} (protocol {})",
        written.requests,
        written.requests_path.display(),
        written.chunks,
        written.chunks_path.display(),
        protocol.name
    );
    Ok(ExitCode::SUCCESS)
}

fn export_perfetto(args: PerfettoArgs) -> anyhow::Result<ExitCode> {
    if !(args.bin_ms.is_finite() && args.bin_ms > 0.0) {
        anyhow::bail!("--bin-ms must be a positive number of milliseconds");
    }
    // As for Parquet: refuse before reading the traces.
    tokentrace_export::run::refuse_existing(&args.output, args.force)?;
    let facts = FactsOptions {
        threads: args.threads.unwrap_or_else(super::analyze::default_threads),
        ..FactsOptions::default()
    };
    let dataset = load(&args.traces, facts)?;
    let options = perfetto::Options {
        max_chunk_events: args.max_chunk_events,
        bin_ns: ((args.bin_ms * 1e6).round() as u64).max(1),
        wall_clock: args.wall_clock,
    };
    let written = perfetto::export_file(&dataset, &args.output, args.force, &options)?;
    println!(
        "wrote {} events to {} ({} chunk instants{})",
        written.events,
        args.output.display(),
        written.chunk_events,
        if written.chunk_events_dropped > 0 {
            format!(
                "; {} chunks of {} requests left out by --max-chunk-events",
                written.chunk_events_dropped, written.requests_without_chunk_events
            )
        } else {
            String::new()
        }
    );
    Ok(ExitCode::SUCCESS)
}

/// Loads the traces as `analyze` does, printing what the reader had to skip.
fn load(traces: &[PathBuf], facts: FactsOptions) -> anyhow::Result<Dataset> {
    let dataset = Dataset::load(traces, facts)?;
    for trace in &dataset.traces {
        for warning in &trace.warnings {
            eprintln!("warning: {}: {warning}", trace.path.display());
        }
    }
    Ok(dataset)
}
