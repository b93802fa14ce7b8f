//! `tokentrace demo`: the whole job on a built-in default. Starts the engine simulator on a free
//! loopback port, records a short run against it, prints the analyzer's report, and says where
//! the trace is and how to measure it again under another protocol.

use anyhow::Context;
use std::path::PathBuf;
use std::process::ExitCode;
use tokentrace_recorder::{Load, ProgressMode, PromptSource, RecordConfig};
use tokentrace_sim::{SimConfig, SimServer};

use super::analyze;

/// Arguments of `tokentrace demo` (none are needed).
#[derive(clap::Args)]
pub struct Args {
    /// Trace file to write.
    #[arg(short, long, default_value = "tokentrace-demo.ttrace")]
    pub output: PathBuf,
    /// Measured requests.
    #[arg(long, default_value_t = 48)]
    pub requests: u64,
    /// Requests in flight at once; above the simulator's 8 batch slots, so queueing shows.
    #[arg(long, default_value_t = 12)]
    pub concurrency: usize,
    /// Protocol of the printed report.
    #[arg(long, default_value = "tokentrace-v1")]
    pub protocol: String,
}

/// The simulated engine: 8 batch slots, speculative decoding of 1.6 tokens per step on average,
/// and a reasoning phase before the answer, so every channel and the queue show in the trace.
fn engine() -> SimConfig {
    SimConfig {
        model: "tokentrace-sim".into(),
        slots: 8,
        spec_tokens_mean: 1.6,
        reasoning_tokens: 48,
        seed: 7,
        ..SimConfig::default()
    }
}

fn recording(base_url: String, args: &Args) -> RecordConfig {
    let mut config = RecordConfig::new(base_url, "tokentrace-sim", args.output.clone());
    config.requests = Some(args.requests);
    config.warmup = 4;
    config.prompts = PromptSource::Synthetic { input_tokens: 512 };
    config.max_tokens = Some(128);
    config.ignore_eos = true;
    config.load = Load::Closed {
        concurrency: args.concurrency,
    };
    config.seed = 7;
    // The demo writes the same file at every run, by design.
    config.overwrite = true;
    config.progress = ProgressMode::Auto;
    config.handle_ctrl_c = true;
    config.argv = std::env::args().collect();
    config.labels = [
        ("engine", "tokentrace-sim"),
        ("gpu", "none (simulated)"),
        ("tier", "demo"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    config
}

/// Runs `tokentrace demo`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let server = SimServer::spawn_background(engine()).context("starting the simulator")?;
    eprintln!(
        "simulator: {} (8 batch slots, reasoning on, speculative decoding)",
        server.base_url()
    );
    eprintln!(
        "recording {} measured requests (+4 warmup) at concurrency {} into {}",
        args.requests,
        args.concurrency,
        args.output.display()
    );
    let summary = tokentrace_recorder::run(recording(server.base_url(), &args))
        .context("recording against the simulator")?;
    server.shutdown().context("stopping the simulator")?;
    eprintln!(
        "recorded {} requests, {} chunks ({})",
        summary.requests, summary.chunks, summary.reason
    );
    println!();
    analyze::run(analyze::Args {
        traces: vec![args.output.clone()],
        capacity: None,
        protocol: Some(args.protocol.clone()),
        versus: None,
        protocol_file: None,
        format: analyze::Format::Table,
        output: None,
        group_by: "all".into(),
        slos: Vec::new(),
        include_warmup: false,
        bootstrap: None,
        confidence: 0.95,
        threads: None,
    })?;
    let trace = args.output.display();
    println!();
    println!("The raw trace is {trace}. Measure it again under another protocol:");
    println!("  tokentrace analyze {trace} --protocol capacity-v4-reasoning --format json");
    println!("  tokentrace analyze {trace} --protocol aiperf");
    println!("  tokentrace analyze {trace} --protocol vllm");
    println!("  tokentrace analyze {trace} --protocol capacity-v3 --versus aiperf");
    println!("  tokentrace report {trace} -o report.html     # open it in a browser");
    println!("  tokentrace inspect {trace}");
    println!("  tokentrace protocols            # every protocol and its definitions");
    Ok(ExitCode::SUCCESS)
}
