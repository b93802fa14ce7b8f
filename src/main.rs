//! The `tokentrace` command line: parses arguments and calls the crates that do the work.

mod cmd;
mod common;

use clap::{Parser, Subcommand};

/// Record raw LLM streaming traces once; measure them under any protocol afterwards.
#[derive(Parser)]
#[command(name = "tokentrace", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start the simulator, record a short run, and print the analyzer's report.
    Demo(cmd::demo::Args),
    /// Record a load run against an OpenAI-compatible endpoint into a trace.
    Record(cmd::record::Args),
    /// Derive metrics from one or more traces under a protocol.
    Analyze(cmd::analyze::Args),
    /// Find the highest concurrency that meets latency SLOs, per workload (or re-judge a
    /// recorded search offline with --reanalyze DIR).
    Capacity(cmd::capacity::Args),
    /// List the protocols, or print one's definitions.
    Protocols(cmd::protocols::Args),
    /// Compare two traces under one protocol.
    Diff(cmd::diff::Args),
    /// Import another tool's raw export (AIPerf, vllm bench serve) as a trace.
    Import(cmd::import::Args),
    /// Write one self-contained HTML report of traces (or a capacity search directory).
    Report(cmd::report::Args),
    /// Export traces for other tools: a Parquet dataset, or a Perfetto timeline.
    Export(cmd::export::Args),
    /// Copy a trace without its captured text, payloads and unsafe header values.
    Redact(cmd::redact::Args),
    /// Merge the shard traces of one sharded run into one trace on one clock.
    Merge(cmd::merge::Args),
    /// Show a trace's header, manifest, counts and integrity.
    Inspect(cmd::inspect::Args),
    /// Run the OpenAI-compatible engine simulator.
    Sim(cmd::sim::Args),
}

/// Signal dispositions the commands need, set before any work.
///
/// SIGXFSZ is ignored, so a file-size limit (`ulimit -f`) makes a write fail with "File too
/// large", reported and handled like a full disk, instead of killing the process mid-trace.
/// Commands that only print (not `record`, `capacity`, `demo` or `sim`, which write to sockets
/// and must see a closed peer as an error, not die of it) get SIGPIPE's default back, so
/// `tokentrace protocols aiperf | head` ends quietly with the conventional status 141.
fn set_signals(command: &Command) {
    common::set_signals(!matches!(
        command,
        Command::Record(_) | Command::Capacity(_) | Command::Demo(_) | Command::Sim(_)
    ));
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    set_signals(&cli.command);
    common::tune_allocator();
    let result = match cli.command {
        Command::Demo(args) => cmd::demo::run(args),
        Command::Record(args) => cmd::record::run(args),
        Command::Analyze(args) => cmd::analyze::run(args),
        Command::Capacity(args) => cmd::capacity::run(args),
        Command::Protocols(args) => cmd::protocols::run(args),
        Command::Diff(args) => cmd::diff::run(args),
        Command::Import(args) => cmd::import::run(args),
        Command::Inspect(args) => cmd::inspect::run(args),
        Command::Merge(args) => cmd::merge::run(args),
        Command::Redact(args) => cmd::redact::run(args),
        Command::Report(args) => cmd::report::run(args),
        Command::Export(args) => cmd::export::run(args),
        Command::Sim(args) => cmd::sim::run(args),
    };
    common::exit_code(result)
}
