//! `tokentrace record`: maps command-line arguments onto a `RecordConfig` and runs it.

use anyhow::{bail, Context};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tokentrace_recorder::shard::{parse_start_at, ShardPlan};
use tokentrace_recorder::{
    Api, Arrival, Capture, ClientKind, HttpVersion, Load, ProgressMode, PromptSource, RecordConfig,
    DEFAULT_ZSTD_LEVEL,
};

/// Arguments of `tokentrace record`.
#[derive(clap::Args)]
pub struct Args {
    /// Base URL of the OpenAI-compatible API, ending in /v1 (http or https).
    #[arg(long)]
    url: String,
    /// Model name to send.
    #[arg(long)]
    model: String,
    /// Which API to stream from.
    #[arg(long, value_enum, default_value_t = ApiArg::Chat)]
    api: ApiArg,
    /// Trace file to write.
    #[arg(short, long)]
    output: PathBuf,
    /// Environment variable holding the API key (default: OPENAI_API_KEY when it is set).
    /// The key is sent as a bearer token and never stored.
    #[arg(long, value_name = "NAME")]
    api_key_env: Option<String>,
    /// Extra request header 'Name: value' (repeatable).
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE")]
    headers: Vec<String>,
    /// Header that carries each request's id, a UUID derived from the run and the request id
    /// (so server logs join the trace), or `none` to send no id.
    #[arg(long, value_name = "NAME|none", default_value = "x-request-id")]
    request_id_header: String,
    /// Replace the output file when it exists (without it the run refuses to start).
    #[arg(long)]
    force: bool,
    /// Do not calibrate synthetic prompts against the server: use a local estimate of tokens
    /// per word (recorded as such in the manifest).
    #[arg(long)]
    no_calibrate: bool,
    /// HTTP version: auto (HTTP/2 when TLS negotiates it), 1 or 2 (prior knowledge on http).
    #[arg(long, value_enum, default_value_t = HttpArg::Auto)]
    http: HttpArg,
    /// PEM file of extra CA certificates to trust.
    #[arg(long, value_name = "FILE")]
    ca_cert: Option<PathBuf>,
    /// Do not verify the server certificate (recorded in the manifest).
    #[arg(long)]
    insecure: bool,
    /// Measured requests to send (default 100 unless --duration is given).
    #[arg(long)]
    requests: Option<u64>,
    /// Warmup requests sent first, recorded with phase=warmup (closed loop: measured requests start once every warmup request has ended).
    #[arg(long, default_value_t = 0)]
    warmup: u64,
    /// Stop sending after this many seconds.
    #[arg(long, value_name = "SECONDS")]
    duration: Option<f64>,
    /// Synthetic prompts of this many tokens, as the server counts them (default 128).
    #[arg(long, conflicts_with = "prompts")]
    input_tokens: Option<u32>,
    /// JSONL prompt file: {"prompt": "..."} or {"messages": [...]} per line.
    #[arg(long, value_name = "FILE")]
    prompts: Option<PathBuf>,
    /// max_tokens of every request.
    #[arg(long, default_value_t = 128)]
    max_tokens: u32,
    /// Ask the server to ignore end-of-sequence (generate exactly max_tokens).
    #[arg(long)]
    ignore_eos: bool,
    /// JSON object merged into every request body (overrides generated keys).
    #[arg(long, value_name = "JSON")]
    extra_body: Option<String>,
    /// `reasoning_effort` to send (e.g. low, medium, high).
    #[arg(long)]
    reasoning_effort: Option<String>,
    /// Send chat_template_kwargs.enable_thinking (on/off) for engines that switch reasoning.
    #[arg(long, value_enum)]
    thinking: Option<OnOff>,
    /// Usage to ask for: none, final (include_usage) or continuous (also per chunk).
    #[arg(long, value_enum, default_value_t = UsageArg::Continuous)]
    usage: UsageArg,
    /// Seed of every random choice (prompts, arrivals).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Closed loop: requests in flight at once (ignored with --rate).
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// Open loop: mean requests per second.
    #[arg(long)]
    rate: Option<f64>,
    /// Open-loop inter-arrival distribution.
    #[arg(long, value_enum, default_value_t = ArrivalArg::Poisson)]
    arrival: ArrivalArg,
    /// Gamma shape for --arrival gamma (< 1 burstier than Poisson, > 1 smoother).
    #[arg(long, default_value_t = 1.0)]
    burstiness: f64,
    /// Whole-request timeout in seconds (0: none). Calibration probes and tokenizer calls
    /// obey it too.
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_TIMEOUT_S)]
    timeout: f64,
    /// Timeout until the first output, in seconds.
    #[arg(long, value_name = "SECONDS")]
    ttft_timeout: Option<f64>,
    /// Seconds in-flight requests get after Ctrl-C before they are cancelled.
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0)]
    grace: f64,
    /// How often a request still streaming hands its new chunks to the trace, in seconds, so
    /// that a killed recorder (kill -9, OOM) keeps them (0: only finished requests).
    #[arg(long, value_name = "SECONDS", default_value_t = 0.5)]
    checkpoint_every: f64,
    /// zstd level of the trace's blocks, 1 (the least CPU while recording) to 19 (the
    /// smallest file). Readers do not care which.
    #[arg(long, value_name = "LEVEL", default_value_t = DEFAULT_ZSTD_LEVEL,
          value_parser = clap::value_parser!(i32).range(1..=19))]
    zstd_level: i32,
    /// Text kept in the trace: none (lengths and hashes), text, or raw event payloads.
    #[arg(long, value_enum, default_value_t = CaptureArg::None)]
    capture: CaptureArg,
    /// Longest SSE line accepted, in bytes.
    #[arg(long, default_value_t = 1 << 20)]
    max_line_bytes: usize,
    /// Manifest label key=value (repeatable), e.g. engine=vllm gpu=h100.
    #[arg(long = "label", value_name = "KEY=VALUE")]
    labels: Vec<String>,
    /// Progress display.
    #[arg(long, value_enum, default_value_t = ProgressArg::Auto)]
    progress: ProgressArg,
    /// Client worker threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Trial number written into every request.
    #[arg(long, default_value_t = 0)]
    trial: u32,
    /// Record shard I of N of one run (docs/SCALE.md): this process sends the plan's requests
    /// k with k mod N = I (and its share of --concurrency); needs --start-at.
    #[arg(long, value_name = "I/N", conflicts_with = "shards")]
    shard: Option<String>,
    /// Record one of N shards, its index I taken from $JOB_COMPLETION_INDEX (set by a
    /// Kubernetes Indexed Job).
    #[arg(long, value_name = "N")]
    shards: Option<u32>,
    /// Start sending at this wall-clock instant: RFC 3339 (2026-12-01T15:00:00Z) or Unix
    /// milliseconds. Shards that share it start together without talking to each other.
    #[arg(long, value_name = "TIME")]
    start_at: Option<String>,
    /// The id every shard of the run shares (default: derived from the plan).
    #[arg(long, value_name = "ID")]
    run_id: Option<String>,
    /// The HTTP client of the measured requests: the recorder's own HTTP/1.1 client, whose
    /// stream reader thread reads every response body; the same client with each request's
    /// task reading its own socket (own-task); or hyper's (--http 2 always uses hyper's).
    /// The last two are kept for comparison: docs/PERFORMANCE.md compares them.
    #[arg(long, value_enum, default_value_t = ClientArg::Own)]
    client: ClientArg,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ClientArg {
    Hyper,
    Own,
    OwnTask,
}

/// The shard plan of `--shard I/N` or `--shards N` with `$JOB_COMPLETION_INDEX`.
fn shard_plan(shard: Option<&str>, shards: Option<u32>) -> anyhow::Result<ShardPlan> {
    if let Some(spec) = shard {
        return ShardPlan::parse(spec).map_err(anyhow::Error::msg);
    }
    let Some(count) = shards else {
        return Ok(ShardPlan::SINGLE);
    };
    let index = std::env::var("JOB_COMPLETION_INDEX").map_err(|_| {
        anyhow::anyhow!("--shards {count} takes the shard index from $JOB_COMPLETION_INDEX, which is not set (or give --shard I/N)")
    })?;
    let parsed = index.trim().parse::<u32>().ok();
    parsed
        .and_then(|i| ShardPlan::new(i, count))
        .ok_or_else(|| {
            anyhow::anyhow!("JOB_COMPLETION_INDEX={index:?} is not a shard index below {count}")
        })
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ApiArg {
    Chat,
    Completions,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum HttpArg {
    Auto,
    #[value(name = "1")]
    One,
    #[value(name = "2")]
    Two,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum OnOff {
    On,
    Off,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum UsageArg {
    None,
    Final,
    Continuous,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ArrivalArg {
    Constant,
    Poisson,
    Gamma,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum CaptureArg {
    None,
    Text,
    Raw,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ProgressArg {
    Auto,
    Plain,
    Off,
}

/// The default whole-request timeout: ten minutes, longer than any sane generation, so that
/// no stalled server holds a run forever.
const DEFAULT_TIMEOUT_S: f64 = 600.0;

fn seconds(name: &str, value: Option<f64>) -> anyhow::Result<Option<Duration>> {
    value
        .map(|s| {
            Duration::try_from_secs_f64(s).with_context(|| format!("{name} {s}: not a duration"))
        })
        .transpose()
}

fn config_from(args: Args) -> anyhow::Result<RecordConfig> {
    let mut config = RecordConfig::new(args.url, args.model, args.output);
    config.api = match args.api {
        ApiArg::Chat => Api::Chat,
        ApiArg::Completions => Api::Completions,
    };
    config.api_key = match &args.api_key_env {
        // Named explicitly: it must be there, or the run would go out unauthenticated.
        Some(name) => match std::env::var(name) {
            Ok(key) if !key.is_empty() => Some(key),
            _ => bail!("--api-key-env {name}: that environment variable is not set"),
        },
        None => std::env::var("OPENAI_API_KEY")
            .ok()
            .filter(|k| !k.is_empty()),
    };
    for header in &args.headers {
        let Some((name, value)) = header.split_once(':') else {
            bail!("--header must look like 'Name: value'");
        };
        config
            .headers
            .push((name.trim().to_string(), value.trim().to_string()));
    }
    config.request_id_header =
        (!args.request_id_header.eq_ignore_ascii_case("none")).then_some(args.request_id_header);
    config.no_calibrate = args.no_calibrate;
    config.overwrite = args.force;
    config.http = match args.http {
        HttpArg::Auto => HttpVersion::Auto,
        HttpArg::One => HttpVersion::Http1,
        HttpArg::Two => HttpVersion::Http2,
    };
    config.ca_cert = args.ca_cert;
    config.insecure = args.insecure;
    config.duration = seconds("--duration", args.duration)?;
    config.requests = match (args.requests, config.duration) {
        (Some(n), _) => Some(n),
        (None, Some(_)) => None,
        (None, None) => Some(100),
    };
    config.warmup = args.warmup;
    config.prompts = match args.prompts {
        Some(path) => PromptSource::File(path),
        None => PromptSource::Synthetic {
            input_tokens: args.input_tokens.unwrap_or(128),
        },
    };
    config.max_tokens = Some(args.max_tokens);
    config.ignore_eos = args.ignore_eos;
    let mut extra = serde_json::Map::new();
    if let Some(effort) = args.reasoning_effort {
        extra.insert("reasoning_effort".into(), serde_json::Value::String(effort));
    }
    if let Some(thinking) = args.thinking {
        let on = matches!(thinking, OnOff::On);
        extra.insert(
            "chat_template_kwargs".into(),
            serde_json::json!({ "enable_thinking": on }),
        );
    }
    if let Some(json) = args.extra_body {
        let value: serde_json::Value =
            serde_json::from_str(&json).context("--extra-body is not valid JSON")?;
        let serde_json::Value::Object(map) = value else {
            bail!("--extra-body must be a JSON object");
        };
        extra.extend(map);
    }
    config.extra_body = (!extra.is_empty()).then_some(extra);
    config.include_usage = args.usage != UsageArg::None;
    config.continuous_usage = args.usage == UsageArg::Continuous;
    config.seed = args.seed;
    config.load = match args.rate {
        Some(rate) => Load::Open {
            rate,
            arrival: match args.arrival {
                ArrivalArg::Constant => Arrival::Constant,
                ArrivalArg::Poisson => Arrival::Poisson,
                ArrivalArg::Gamma => Arrival::Gamma {
                    burstiness: args.burstiness,
                },
            },
        },
        None => Load::Closed {
            concurrency: args.concurrency,
        },
    };
    config.timeout = seconds("--timeout", Some(args.timeout).filter(|s| *s != 0.0))?;
    config.ttft_timeout = seconds("--ttft-timeout", args.ttft_timeout)?;
    config.grace = seconds("--grace", Some(args.grace))?.unwrap_or_default();
    config.checkpoint_every = seconds(
        "--checkpoint-every",
        Some(args.checkpoint_every).filter(|s| *s != 0.0),
    )?;
    config.zstd_level = args.zstd_level;
    config.capture = match args.capture {
        CaptureArg::None => Capture::None,
        CaptureArg::Text => Capture::Text,
        CaptureArg::Raw => Capture::Raw,
    };
    config.line_limit = args.max_line_bytes;
    let mut labels = BTreeMap::new();
    for label in &args.labels {
        let Some((key, value)) = label.split_once('=') else {
            bail!("--label must look like key=value, got {label:?}");
        };
        labels.insert(key.to_string(), value.to_string());
    }
    config.labels = labels;
    config.progress = match args.progress {
        ProgressArg::Auto => ProgressMode::Auto,
        ProgressArg::Plain => ProgressMode::Plain,
        ProgressArg::Off => ProgressMode::Off,
    };
    config.threads = args.threads.max(1);
    config.trial = args.trial;
    config.shard = shard_plan(args.shard.as_deref(), args.shards)?;
    config.start_at_realtime_ns = args
        .start_at
        .as_deref()
        .map(parse_start_at)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    config.run_id = args.run_id.clone();
    config.client = match args.client {
        ClientArg::Hyper => ClientKind::Hyper,
        ClientArg::Own => ClientKind::Own,
        ClientArg::OwnTask => ClientKind::OwnTask,
    };
    config.handle_ctrl_c = true;
    config.argv = std::env::args().collect();
    Ok(config)
}

/// Runs `tokentrace record`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let config = config_from(args)?;
    let summary = tokentrace_recorder::run(config)?;
    // The trace is finished by now: a closed stdout (`record … | head -1`) only loses this
    // summary, so a failed write is not an error, and never a panic (SIGPIPE stays ignored for
    // the sockets' sake).
    let _ = print_summary(&summary, &mut std::io::stdout().lock());
    Ok(ExitCode::SUCCESS)
}

/// The two summary lines `record` prints.
fn print_summary(
    summary: &tokentrace_recorder::RunSummary,
    out: &mut impl std::io::Write,
) -> std::io::Result<()> {
    let outcomes: Vec<String> = summary
        .outcomes
        .iter()
        .map(|(name, n)| format!("{name}={n}"))
        .collect();
    writeln!(
        out,
        "recorded {} requests, {} chunks into {} ({}; {})",
        summary.requests,
        summary.chunks,
        summary.output.display(),
        summary.reason,
        outcomes.join(" "),
    )?;
    let health = &summary.client_health;
    let number = |value: Option<u64>| value.unwrap_or(0) as f64;
    let cpu_ns = number(health.cpu_ns);
    let rss_mib = number(health.max_rss_bytes) / 1048576.0;
    if summary.chunks == 0 {
        // No chunk, no per-chunk cost to speak of.
        return writeln!(
            out,
            "client: {:.0} ms CPU, peak RSS {rss_mib:.1} MiB, no chunks recorded",
            cpu_ns / 1e6
        );
    }
    let chunks = summary.chunks as f64;
    writeln!(
        out,
        "client: {:.3} us CPU per chunk ({:.3} us user), {:.0} ms CPU, peak RSS {rss_mib:.1} MiB (before load {:.1} MiB), \
         max scheduling lag {:.2} ms, writer back-pressure {}",
        cpu_ns / chunks / 1000.0,
        number(health.cpu_user_ns) / chunks / 1000.0,
        cpu_ns / 1e6,
        number(health.rss_before_load_bytes) / 1048576.0,
        number(health.max_sched_lag_ns) / 1e6,
        health.backpressure_events.unwrap_or(0),
    )
}
