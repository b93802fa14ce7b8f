//! `tokentrace analyze`: metrics of one or more traces under a protocol.

use anyhow::Context;
use serde_json::{Map, Value};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use tokentrace_analyzer::analysis::{self, Analysis, AnalyzeOptions, Bootstrap};
use tokentrace_analyzer::dataset::Dataset;
use tokentrace_analyzer::facts::FactsOptions;
use tokentrace_analyzer::groups::{self, GroupBy};
use tokentrace_analyzer::protocol::{builtin, Protocol};
use tokentrace_analyzer::report::{self, requests, table};
use tokentrace_analyzer::slo::Slo;

/// Output formats of `analyze`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A readable table of every metric's statistics.
    Table,
    /// The protocol's report, pretty JSON with keys in protocol order.
    Json,
    /// One CSV row per request.
    Csv,
    /// One JSON object per request per line.
    Jsonl,
}

/// Arguments of `tokentrace analyze`.
#[derive(clap::Args)]
pub struct Args {
    /// Trace files (several: analyzed together, or side by side with --group-by).
    #[arg(required_unless_present = "capacity")]
    pub traces: Vec<PathBuf>,
    /// A `tokentrace capacity` directory: print its report rebuilt under --protocol and --slo
    /// (default: the search's own), as `tokentrace capacity --reanalyze DIR` does.
    #[arg(long, value_name = "DIR", conflicts_with = "traces")]
    pub capacity: Option<PathBuf>,
    /// Protocol name (see `tokentrace protocols`).
    #[arg(long, short = 'p')]
    pub protocol: Option<String>,
    /// A second protocol: show the run under --protocol (A) and this one (B) side by side,
    /// metric pairs with both definitions and how far each statistic moves (table or json).
    #[arg(long, value_name = "PROTOCOL", conflicts_with = "capacity")]
    pub versus: Option<String>,
    /// A TOML file defining a protocol (see docs/PROTOCOLS.md, "Your own protocol").
    #[arg(long)]
    pub protocol_file: Option<PathBuf>,
    /// Output format.
    #[arg(long, short = 'f', value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Write to this file instead of standard output.
    #[arg(long, short = 'o')]
    pub output: Option<PathBuf>,
    /// Analyze groups side by side: `trace` or `label:KEY` (default: all traces together).
    #[arg(long, default_value = "all")]
    pub group_by: String,
    /// A service-level objective METRIC:STAT OP THRESHOLD UNIT, e.g. `ttft:p95<500ms`
    /// (repeatable; drives goodput). OP is <, <=, > or >=; the unit is required: ms, s or us
    /// for times, tok/s for rates, tokens or chunks for counts, % for ratios.
    #[arg(long = "slo")]
    pub slos: Vec<String>,
    /// Count warmup requests too.
    #[arg(long)]
    pub include_warmup: bool,
    /// Add bootstrap confidence intervals of each metric's mean and percentiles with this
    /// many resamples (tokentrace's own report layout; seeded, so reproducible).
    #[arg(long, value_name = "RESAMPLES")]
    pub bootstrap: Option<usize>,
    /// Confidence level of --bootstrap intervals.
    #[arg(long, default_value_t = 0.95)]
    pub confidence: f64,
    /// Threads decoding trace blocks (default: the available cores).
    #[arg(long)]
    pub threads: Option<usize>,
}

/// Runs `tokentrace analyze`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if let Some(dir) = &args.capacity {
        let table = match args.format {
            Format::Table => true,
            Format::Json => false,
            Format::Csv | Format::Jsonl => {
                anyhow::bail!("--capacity prints a table or the report's JSON: --format table|json")
            }
        };
        let (protocol, output) = (args.protocol.as_deref(), args.output.as_deref());
        super::capacity::print_search(dir, protocol, &args.slos, table, output)?;
        return Ok(ExitCode::SUCCESS);
    }
    let protocol = builtin::resolve(args.protocol.as_deref(), args.protocol_file.as_deref())?;
    let group_by = GroupBy::parse(&args.group_by).map_err(anyhow::Error::msg)?;
    let options = options(&protocol, &args.slos, args.include_warmup)?;
    let facts = FactsOptions {
        threads: args.threads.unwrap_or_else(default_threads),
        ..analysis::facts_options(&protocol, &options)
    };
    let dataset = Dataset::load(&args.traces, facts)?;
    for trace in &dataset.traces {
        for warning in &trace.warnings {
            eprintln!("warning: {}: {warning}", trace.path.display());
        }
    }
    if let Some(b) = &args.versus {
        return versus(&args, &protocol, &options, &dataset, b);
    }
    let mut out: Box<dyn Write> = match &args.output {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    if !(0.5..1.0).contains(&args.confidence) {
        anyhow::bail!("--confidence must be in [0.5, 1)");
    }
    let bootstrap = args.bootstrap.map(|resamples| Bootstrap {
        resamples,
        confidence: args.confidence,
        seed: 0x5eed,
    });
    render(
        &protocol,
        &dataset,
        &group_by,
        &options,
        bootstrap,
        args.format,
        &mut out,
    )?;
    out.flush().context("writing the report")?;
    Ok(ExitCode::SUCCESS)
}

/// `analyze --versus B`: the traces under the main protocol and under B, side by side.
fn versus(
    args: &Args,
    protocol: &Protocol,
    options: &AnalyzeOptions,
    dataset: &Dataset,
    b: &str,
) -> anyhow::Result<ExitCode> {
    if args.group_by != "all" {
        anyhow::bail!("--versus compares all traces together; leave out --group-by");
    }
    let protocol_b = builtin::resolve(Some(b), None)?;
    let options_b = self::options(&protocol_b, &[], args.include_warmup)?;
    let facts_b = FactsOptions {
        threads: args.threads.unwrap_or_else(default_threads),
        ..analysis::facts_options(&protocol_b, &options_b)
    };
    let dataset_b = Dataset::load(&args.traces, facts_b)?;
    let all: Vec<u32> = (0..dataset.traces.len() as u32).collect();
    let a = Analysis::new(protocol, dataset, &all, options);
    let bb = Analysis::new(&protocol_b, &dataset_b, &all, &options_b);
    let compared = tokentrace_analyzer::versus::versus(&a, &bb);
    let text = match args.format {
        Format::Table => report::versus::render(&compared, protocol, &protocol_b),
        Format::Json => {
            let mut text = serde_json::to_string_pretty(&compared.to_json(protocol, &protocol_b))?;
            text.push('\n');
            text
        }
        Format::Csv | Format::Jsonl => {
            anyhow::bail!("--versus prints a table or json (--format table|json)")
        }
    };
    match &args.output {
        Some(path) => {
            std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?
        }
        None => std::io::stdout().lock().write_all(text.as_bytes())?,
    }
    Ok(ExitCode::SUCCESS)
}

/// The cores this process may use.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Parses the SLOs against the protocol.
pub fn options(
    protocol: &Protocol,
    slos: &[String],
    include_warmup: bool,
) -> anyhow::Result<AnalyzeOptions> {
    let slos = slos
        .iter()
        .map(|text| Slo::parse(text).and_then(|slo| slo.resolve(protocol)))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(AnalyzeOptions {
        include_warmup,
        slos,
    })
}

/// Writes the whole output of `analyze`.
fn render(
    protocol: &Protocol,
    dataset: &Dataset,
    group_by: &GroupBy,
    options: &AnalyzeOptions,
    bootstrap: Option<Bootstrap>,
    format: Format,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let groups = groups::groups(dataset, group_by);
    let grouped = *group_by != GroupBy::All;
    let analyses: Vec<(String, Analysis<'_>)> = groups
        .iter()
        .map(|(name, traces)| {
            let mut analysis = Analysis::new(protocol, dataset, traces, options);
            analysis.bootstrap = bootstrap;
            (name.clone(), analysis)
        })
        .collect();
    match format {
        Format::Table => {
            for (i, (name, analysis)) in analyses.iter().enumerate() {
                if i > 0 {
                    out.write_all(b"\n")?;
                }
                let title = if grouped {
                    format!("[{name}] ")
                } else {
                    String::new()
                };
                out.write_all(table::render(analysis, &title).as_bytes())?;
            }
        }
        Format::Json if grouped => {
            let map: Map<String, Value> = analyses
                .iter()
                .map(|(name, a)| (name.clone(), report::json_report(a)))
                .collect();
            serde_json::to_writer_pretty(&mut *out, &serde_json::json!({ "groups": map }))?;
            out.write_all(b"\n")?;
        }
        Format::Json => {
            for (_, analysis) in &analyses {
                report::write_json(analysis, out)?;
            }
        }
        Format::Csv | Format::Jsonl => {
            let mut writer = requests::RowWriter::new(format == Format::Csv);
            for (name, analysis) in &analyses {
                for row in requests::rows(analysis) {
                    let mut with_group = Map::new();
                    if grouped {
                        with_group.insert("group".into(), Value::String(name.clone()));
                    }
                    with_group.extend(row);
                    writer.write(&with_group, out)?;
                }
            }
        }
    }
    Ok(())
}
