//! `tokentrace capacity`: the highest concurrency that meets the SLOs, per workload; or, with
//! `--reanalyze DIR`, the report of a recorded search rebuilt offline (under other SLOs too).

use super::capacity_table as table;
use anyhow::{bail, Context};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;
use tokentrace_capacity::manifest::{experiment_from_labels, REPORT_FILE};
use tokentrace_capacity::reanalyze::search_view;
use tokentrace_capacity::report::to_pretty_string;
use tokentrace_capacity::search::{Bracket, SearchObserver, TrialSpec};
use tokentrace_capacity::{
    reanalyze, run_capacity, slo, CapacityConfig, SearchSettings, Slo, TrialHooks, Workload,
};
use tokentrace_recorder::{Api, RecordConfig};

/// Arguments of `tokentrace capacity`.
#[derive(clap::Args)]
pub struct Args {
    /// Rebuild the report of the search recorded in DIR (no traffic is sent) and print it.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["url", "output"])]
    reanalyze: Option<PathBuf>,
    /// Base URL of the OpenAI-compatible API, ending in /v1.
    #[arg(long, required_unless_present = "reanalyze")]
    url: Option<String>,
    /// Model name to send.
    #[arg(long, required_unless_present = "reanalyze")]
    model: Option<String>,
    /// Which API to stream from.
    #[arg(long, value_enum, default_value_t = ApiArg::Chat)]
    api: ApiArg,
    /// Directory for the search: one trace per trial, capacity.json and report.json.
    #[arg(short, long, value_name = "DIR", required_unless_present = "reanalyze")]
    output: Option<PathBuf>,
    /// Workload INPUT/OUTPUT tokens, e.g. 2048/512 (repeatable; output forced with ignore_eos).
    #[arg(
        long = "workload",
        value_name = "ISL/OSL",
        required_unless_present = "reanalyze"
    )]
    workloads: Vec<String>,
    /// Objective METRIC:STAT OP THRESHOLD UNIT, e.g. ttft:p95<10000ms (repeatable; all must
    /// hold), the grammar of `analyze --slo`. Metrics: ttft, itl, request_latency (units ms,
    /// s, us), per_user_tps (tok/s); OP <, <=, >, >=; a unit is required.
    /// With --reanalyze: judge under these instead of the search's own.
    #[arg(long = "slo", value_name = "SPEC")]
    slos: Vec<String>,
    /// Definitions the SLOs are judged under: aiperf (default; the report's metric blocks use
    /// it too) or any protocol of `tokentrace protocols` (capacity-v3, vllm, …).
    /// With --reanalyze: judge under this instead of the search's own.
    #[arg(long)]
    protocol: Option<String>,
    /// Lowest concurrency (the first level tried).
    #[arg(long, default_value_t = 1)]
    min_concurrency: u32,
    /// Highest concurrency tried.
    #[arg(long, default_value_t = 1024)]
    max_concurrency: u32,
    /// Trials per level; a level passes only if every trial passes.
    #[arg(long, default_value_t = 3)]
    trials: u32,
    /// Warmup requests at the start of every trial.
    #[arg(long, default_value_t = 8)]
    warmups: u32,
    /// Measured requests per trial.
    #[arg(long, default_value_t = 64)]
    requests: u32,
    /// Run every trial of a level even after one fails, so any level can be re-judged later.
    #[arg(long)]
    all_trials: bool,
    /// Start no trial after this many seconds; the bracket so far is reported.
    #[arg(long, value_name = "SECONDS")]
    time_budget: Option<f64>,
    /// Shell command run before every trial (sees TOKENTRACE_WORKLOAD, _CONCURRENCY, _TRIAL).
    #[arg(long, value_name = "CMD")]
    before_trial: Option<String>,
    /// URL to POST before every trial, e.g. http://host:30000/flush_cache.
    #[arg(long, value_name = "URL")]
    flush_url: Option<String>,
    /// Describe the cache policy in the report (default: derived from the hooks).
    #[arg(long, value_name = "TEXT")]
    cache_policy: Option<String>,
    /// Experiment label KEY=VALUE for the report (repeatable; dotted keys nest, numbers stay
    /// numbers, a JSON-quoted value stays a string), e.g. hardware='1 x H100' tensor_parallelism=1.
    #[arg(long = "label", value_name = "KEY=VALUE")]
    labels: Vec<String>,
    /// Sampling temperature sent with every request.
    #[arg(long, default_value_t = 0.0)]
    temperature: f64,
    /// Environment variable holding the API key (default: OPENAI_API_KEY when set).
    #[arg(long, value_name = "NAME")]
    api_key_env: Option<String>,
    /// Extra request header 'Name: value' (repeatable).
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE")]
    headers: Vec<String>,
    /// Do not verify the server certificate.
    #[arg(long)]
    insecure: bool,
    /// Whole-request timeout in seconds.
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<f64>,
    /// Seed of the prompts (each trial derives its own from it).
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ApiArg {
    Chat,
    Completions,
}

/// Runs `tokentrace capacity`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if let Some(dir) = &args.reanalyze {
        return reanalyze_command(dir, args.protocol.as_deref(), &args.slos);
    }
    let config = config_from(args)?;
    let mut progress = Progress;
    run_capacity(&config, &mut progress)?;
    // The summary is the table `analyze --capacity DIR` prints, rebuilt from the directory
    // the search just wrote, so the two never differ.
    print_search(&config.dir, None, &[], true, None)?;
    eprintln!("report: {}", config.dir.join(REPORT_FILE).display());
    Ok(ExitCode::SUCCESS)
}

/// `analyze --capacity DIR`: the search in `dir` judged under `protocol` and the SLO specs
/// (the search's own when absent/empty), as a table for people or as the report's JSON
/// (exactly what the search wrote to report.json under its own SLOs), to `output` or
/// standard output.
pub fn print_search(
    dir: &Path,
    protocol: Option<&str>,
    slo_specs: &[String],
    table: bool,
    output: Option<&Path>,
) -> anyhow::Result<()> {
    let slos = slo_list(slo_specs)?;
    let given = (!slos.is_empty()).then_some(slos.as_slice());
    let view = search_view(dir, protocol, given)?;
    let text = if table {
        table::render(&view, tokentrace_analyzer::report::table::terminal_width())
    } else {
        to_pretty_string(&view.report())
    };
    match output {
        Some(path) => {
            std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?
        }
        None => std::io::stdout().lock().write_all(text.as_bytes())?,
    }
    Ok(())
}

/// Prints the report of the search in `dir`, rebuilt under `protocol` and `slos` (the
/// search's own when None), exactly as the search wrote it to report.json.
fn print_reanalysis(
    dir: &std::path::Path,
    protocol: Option<&str>,
    slos: Option<&[Slo]>,
) -> anyhow::Result<ExitCode> {
    let report = reanalyze(dir, protocol, slos)?;
    std::io::stdout()
        .lock()
        .write_all(to_pretty_string(&report).as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

/// `capacity --reanalyze DIR` (and `analyze --capacity DIR`): the report of a recorded search
/// rebuilt under `protocol` and the SLO specs as typed (the search's own when absent/empty).
pub fn reanalyze_command(
    dir: &std::path::Path,
    protocol: Option<&str>,
    slo_specs: &[String],
) -> anyhow::Result<ExitCode> {
    let slos = slo_list(slo_specs)?;
    let given = (!slos.is_empty()).then_some(slos.as_slice());
    print_reanalysis(dir, protocol, given)
}

fn slo_list(specs: &[String]) -> anyhow::Result<Vec<Slo>> {
    if specs.is_empty() {
        return Ok(Vec::new());
    }
    Ok(slo::parse_all(specs)?)
}

fn seconds(name: &str, value: Option<f64>) -> anyhow::Result<Option<Duration>> {
    value
        .map(|s| {
            Duration::try_from_secs_f64(s).with_context(|| format!("{name} {s}: not a duration"))
        })
        .transpose()
}

fn config_from(args: Args) -> anyhow::Result<CapacityConfig> {
    let (Some(url), Some(model), Some(dir)) = (args.url, args.model, args.output) else {
        bail!("--url, --model and --output are required");
    };
    let mut target = RecordConfig::new(url, model, dir.join("unused.ttrace"));
    target.api = match args.api {
        ApiArg::Chat => Api::Chat,
        ApiArg::Completions => Api::Completions,
    };
    let key_var = args.api_key_env.unwrap_or_else(|| "OPENAI_API_KEY".into());
    target.api_key = std::env::var(&key_var).ok().filter(|k| !k.is_empty());
    for header in &args.headers {
        let Some((name, value)) = header.split_once(':') else {
            bail!("--header must look like 'Name: value'");
        };
        target
            .headers
            .push((name.trim().to_string(), value.trim().to_string()));
    }
    target.insecure = args.insecure;
    target.timeout = seconds("--timeout", args.timeout)?;
    target.seed = args.seed;
    target.argv = std::env::args().collect();
    let workloads = args
        .workloads
        .iter()
        .map(|w| w.parse::<Workload>())
        .collect::<Result<Vec<_>, _>>()?;
    if args.slos.is_empty() {
        bail!("give at least one --slo, e.g. --slo 'ttft:p95<10000ms'");
    }
    let mut labels = Vec::new();
    for label in &args.labels {
        let Some((key, value)) = label.split_once('=') else {
            bail!("--label must look like KEY=VALUE");
        };
        labels.push((key.trim().to_string(), value.to_string()));
    }
    // Every trial's trace carries the labels too, so analyzing one alone (e.g. the
    // capacity-v3 report's engine, gpu, tier) sees the same experiment as the search report.
    target.labels.extend(labels.iter().cloned());
    if !args.temperature.is_finite() || args.temperature < 0.0 {
        bail!("--temperature must be a non-negative number");
    }
    Ok(CapacityConfig {
        dir,
        target,
        workloads,
        slos: slo_list(&args.slos)?,
        settings: SearchSettings {
            min_concurrency: args.min_concurrency,
            max_concurrency: args.max_concurrency,
            trials_per_level: args.trials,
            warmups_per_trial: args.warmups,
            measured_requests_per_trial: args.requests,
            complete_levels: args.all_trials,
            time_budget: seconds("--time-budget", args.time_budget)?,
        },
        protocol: args
            .protocol
            .unwrap_or_else(|| tokentrace_capacity::judge::DEFAULT_PROTOCOL.into()),
        temperature: args.temperature,
        hooks: TrialHooks {
            before_trial: args.before_trial,
            flush_url: args.flush_url,
        },
        cache_policy: args.cache_policy,
        experiment: experiment_from_labels(&labels),
    })
}

/// Progress lines on stderr: workload, level, trial and the bracket so far.
struct Progress;

fn bracket_text(b: Bracket) -> String {
    let show = |v: Option<u32>| v.map_or("-".to_string(), |c| c.to_string());
    format!(
        "passing {} / failing {}",
        show(b.highest_passing),
        show(b.lowest_failing)
    )
}

impl SearchObserver for Progress {
    fn trial_started(&mut self, spec: &TrialSpec, bracket: Bracket) {
        eprintln!(
            "[{}] concurrency {} trial {} ... ({})",
            spec.workload.label(),
            spec.concurrency,
            spec.trial,
            bracket_text(bracket)
        );
    }

    fn trial_finished(&mut self, spec: &TrialSpec, passed: bool, bracket: Bracket) {
        eprintln!(
            "[{}] concurrency {} trial {} {} ({})",
            spec.workload.label(),
            spec.concurrency,
            spec.trial,
            if passed { "passed" } else { "FAILED" },
            bracket_text(bracket)
        );
    }
}
