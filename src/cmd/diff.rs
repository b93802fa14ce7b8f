//! `tokentrace diff`: the same protocol on two runs; per metric the change and whether it is
//! beyond noise. Exit status 0 either way (a comparison is not a failure); use the JSON
//! `beyond_noise` fields to gate CI.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use tokentrace_analyzer::analysis::{self, Analysis};
use tokentrace_analyzer::compare::{self, CompareOptions, FailureChange, MetricChange};
use tokentrace_analyzer::dataset::{Dataset, TraceInfo};
use tokentrace_analyzer::protocol::builtin;
use tokentrace_analyzer::report::table::{number, terminal_width, Align, Grid};
use tokentrace_format::clock::utc_iso8601;

/// Arguments of `tokentrace diff`.
#[derive(clap::Args)]
pub struct Args {
    /// The baseline trace.
    pub a: PathBuf,
    /// The trace compared with it.
    pub b: PathBuf,
    /// Protocol name (see `tokentrace protocols`).
    #[arg(long, short = 'p')]
    pub protocol: Option<String>,
    /// A TOML file defining a protocol.
    #[arg(long)]
    pub protocol_file: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Bootstrap resamples.
    #[arg(long, default_value_t = 1000)]
    pub resamples: usize,
    /// Confidence level of the intervals (and 1 - significance of the test).
    #[arg(long, default_value_t = 0.95)]
    pub confidence: f64,
    /// Seed of the bootstrap.
    #[arg(long, default_value_t = 0x5eed)]
    pub seed: u64,
    /// Count warmup requests too.
    #[arg(long)]
    pub include_warmup: bool,
}

/// Runs `tokentrace diff`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if !(0.5..1.0).contains(&args.confidence) {
        anyhow::bail!("--confidence must be in [0.5, 1)");
    }
    let protocol = builtin::resolve(args.protocol.as_deref(), args.protocol_file.as_deref())?;
    let options = super::analyze::options(&protocol, &[], args.include_warmup)?;
    let facts = analysis::facts_options(&protocol, &options);
    let a = Dataset::load(std::slice::from_ref(&args.a), facts)?;
    let b = Dataset::load(std::slice::from_ref(&args.b), facts)?;
    let (aa, ab) = (
        Analysis::new(&protocol, &a, &[0], &options),
        Analysis::new(&protocol, &b, &[0], &options),
    );
    let compare_options = CompareOptions {
        resamples: args.resamples,
        confidence: args.confidence,
        seed: args.seed,
        ..CompareOptions::default()
    };
    let changes = compare::compare(&aa, &ab, &compare_options);
    let failures = compare::compare_failures(&aa, &ab, &compare_options);
    let mut warnings = Vec::new();
    for (side, analysis) in [("A", &aa), ("B", &ab)] {
        warnings.extend(side_warnings(side, analysis));
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        let value = serde_json::json!({
            "protocol": protocol.name,
            "a": a.traces[0].label,
            "b": b.traces[0].label,
            "runs": [run_json(&a.traces[0]), run_json(&b.traces[0])],
            "confidence": args.confidence,
            "resamples": args.resamples,
            "failures": failures.to_json(),
            "metrics": changes.iter().map(MetricChange::to_json).collect::<Vec<_>>(),
            "warnings": warnings,
        });
        serde_json::to_writer_pretty(&mut out, &value)?;
        writeln!(out)?;
    } else {
        writeln!(out, "A = {}", run_label(&a.traces[0]))?;
        writeln!(out, "B = {}", run_label(&b.traces[0]))?;
        for warning in &warnings {
            writeln!(out, "warning: {warning}")?;
        }
        write!(
            out,
            "{}",
            table(&protocol.name, &failures, &changes, args.confidence)
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// What a reader must know before trusting one side: damage, or nothing to compare.
fn side_warnings(side: &str, analysis: &Analysis<'_>) -> Vec<String> {
    let mut warnings = Vec::new();
    for &t in &analysis.traces {
        let trace = &analysis.dataset.traces[t as usize];
        if trace.integrity == "corrupt" {
            warnings.push(format!(
                "{side} ({}) is damaged: {}; its figures cover only the blocks that could be read",
                trace.label,
                trace.warnings.join("; ")
            ));
        }
    }
    if analysis.counted.is_empty() {
        warnings.push(format!(
            "{side} has no successful request ({} failed): its latency figures are empty, and only \
             the failure rate compares",
            analysis.failed.len()
        ));
    }
    warnings
}

/// A side named by its run: file name, start time and labels.
fn run_label(trace: &TraceInfo) -> String {
    let m = &trace.manifest;
    let mut label = trace.label.clone();
    let mut facts = Vec::new();
    if m.start_realtime_ns > 0 {
        facts.push(format!("started {}", utc_iso8601(m.start_realtime_ns)));
    }
    if !m.model.is_empty() {
        facts.push(format!("model {}", m.model));
    }
    facts.extend(m.labels.iter().map(|(k, v)| format!("{k}={v}")));
    if !facts.is_empty() {
        label.push_str(&format!(" ({})", facts.join(", ")));
    }
    label
}

fn run_json(trace: &TraceInfo) -> serde_json::Value {
    let m = &trace.manifest;
    serde_json::json!({
        "file": trace.label,
        "start_realtime_ns": m.start_realtime_ns,
        "model": m.model,
        "labels": m.labels,
        "integrity": trace.integrity,
    })
}

/// The comparison for people: the failure rates, then one row per metric with its unit,
/// both medians and the interval of their difference in [`number::DIGITS`] significant
/// digits, the change in percent, the test's p value and the verdict.
fn table(
    protocol: &str,
    failures: &FailureChange,
    changes: &[MetricChange],
    confidence: f64,
) -> String {
    let mut s = format!("protocol {protocol}\n");
    let (ra, rb) = failures.rates();
    let pct = |r: Option<f64>| r.map_or("-".to_string(), |r| format!("{:.1}%", r * 100.0));
    let verdict = if failures.beyond_noise {
        format!("{} (beyond noise)", failures.direction)
    } else {
        "within noise".into()
    };
    s += &format!(
        "failed: A {} of {} ({}), B {} of {} ({}), p {} · {verdict}\n\n",
        failures.failed.0,
        failures.total.0,
        pct(ra),
        failures.failed.1,
        failures.total.1,
        pct(rb),
        p_value(failures.p_value),
    );
    let ci = format!("{:.0}% CI of B-A", confidence * 100.0);
    let mut grid = Grid::new(&[
        ("metric", Align::Left),
        ("unit", Align::Left),
        ("median A", Align::Right),
        ("median B", Align::Right),
        ("change", Align::Right),
        (ci.as_str(), Align::Right),
        ("p (MWU)", Align::Right),
        ("verdict", Align::Left),
    ]);
    for c in changes {
        let change = c
            .median_change_pct()
            .map_or("-".to_string(), |p| format!("{p:+.1}%"));
        let interval = c.median_diff_ci.map_or("-".to_string(), |(lo, hi)| {
            format!("[{}, {}]", number::value(Some(lo)), number::value(Some(hi)))
        });
        let verdict = if c.samples.0 == 0 || c.samples.1 == 0 {
            "no samples on one side".into()
        } else if c.beyond_noise {
            format!("{} (beyond noise)", c.direction)
        } else {
            "within noise".into()
        };
        grid.push(vec![
            c.metric.clone(),
            c.unit.clone(),
            number::value(c.median.0),
            number::value(c.median.1),
            change,
            interval,
            p_value(c.p_value),
            verdict,
        ]);
    }
    // Metric and unit start every row; what does not fit beside them is stacked below.
    s += &grid.render_split(2, terminal_width());
    s.push('\n');
    s
}

/// A p value to four decimals, or `<0.0001` below them (a smaller one tells nothing more).
fn p_value(p: Option<f64>) -> String {
    match p {
        None => "-".to_string(),
        Some(p) if p < 0.0001 => "<0.0001".to_string(),
        Some(p) => format!("{p:.4}"),
    }
}
