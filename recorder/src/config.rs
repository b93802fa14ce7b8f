//! Everything a recording run is told: target, workload, load shape, failure limits, output.
//! The command line maps its arguments onto [`RecordConfig`]; in-process callers (the demo, the
//! capacity search) build one directly.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Which OpenAI endpoint to stream from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `POST {base}/chat/completions` with `messages`.
    Chat,
    /// `POST {base}/completions` with `prompt`.
    Completions,
}

impl Api {
    /// The name used in the manifest.
    pub fn name(self) -> &'static str {
        match self {
            Api::Chat => "chat",
            Api::Completions => "completions",
        }
    }
}

/// HTTP version policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpVersion {
    /// HTTP/2 when TLS ALPN offers it, HTTP/1.1 otherwise.
    Auto,
    /// HTTP/1.1 only.
    Http1,
    /// HTTP/2 only (prior knowledge on plain TCP).
    Http2,
}

/// Which HTTP client carries the measured requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientKind {
    /// hyper's pooled client (HTTP/1.1 and HTTP/2).
    Hyper,
    /// The recorder's own HTTP/1.1 client ([`crate::h1`]), response bodies read by the stream
    /// reader thread ([`crate::reader`]). HTTP/2 (`--http 2`) goes through hyper all the same.
    #[default]
    Own,
    /// The own client with each request's task reading its own socket (the stream reader's
    /// predecessor, kept for comparison).
    OwnTask,
}

impl ClientKind {
    /// The name the manifest and `--client` use.
    pub fn name(self) -> &'static str {
        match self {
            ClientKind::Hyper => "hyper",
            ClientKind::Own => "own-http1",
            ClientKind::OwnTask => "own-http1-task",
        }
    }
}

/// How request start times are chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Load {
    /// `concurrency` requests always in flight; each starts when a slot frees.
    Closed {
        /// Requests in flight at once.
        concurrency: usize,
    },
    /// Requests start on a schedule regardless of how the server keeps up.
    Open {
        /// Mean requests per second.
        rate: f64,
        /// The inter-arrival distribution.
        arrival: Arrival,
    },
}

/// Inter-arrival distribution of an open-loop schedule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arrival {
    /// Exactly 1/rate apart.
    Constant,
    /// Exponential gaps (a Poisson process).
    Poisson,
    /// Gamma gaps with shape = burstiness (< 1 burstier than Poisson, > 1 smoother).
    Gamma {
        /// Shape parameter of the gamma distribution.
        burstiness: f64,
    },
}

/// What text goes into the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capture {
    /// Lengths and hashes only.
    None,
    /// Each event's extracted text.
    Text,
    /// Each event's whole `data` payload.
    Raw,
}

impl Capture {
    /// The name used in the manifest.
    pub fn name(self) -> &'static str {
        match self {
            Capture::None => "none",
            Capture::Text => "text",
            Capture::Raw => "raw",
        }
    }
}

/// Where prompts come from.
#[derive(Debug, Clone, PartialEq)]
pub enum PromptSource {
    /// Synthetic prompts of about this many tokens, calibrated against the server.
    Synthetic {
        /// Target prompt tokens as the server counts them.
        input_tokens: u32,
    },
    /// A JSONL file of `{"prompt": …}` or `{"messages": […]}` lines, used round robin.
    File(PathBuf),
}

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressMode {
    /// A bar on a terminal, plain lines otherwise.
    Auto,
    /// Plain periodic lines on stderr.
    Plain,
    /// Nothing.
    Off,
}

/// A complete description of one recording run.
#[derive(Debug, Clone)]
pub struct RecordConfig {
    /// Base URL ending in `/v1`.
    pub base_url: String,
    /// Chat or completions.
    pub api: Api,
    /// Model name sent in every request.
    pub model: String,
    /// Bearer token; sent as `Authorization`, never written anywhere.
    pub api_key: Option<String>,
    /// Extra request headers (name, value), sent on every request, probes included.
    pub headers: Vec<(String, String)>,
    /// Header carrying each request's id (a UUID derived from the run and the request id);
    /// None sends no id. A header of the same name in `headers` takes its place.
    pub request_id_header: Option<String>,
    /// Skip prompt calibration: synthetic prompts use a local estimate of the token count.
    pub no_calibrate: bool,
    /// HTTP version policy.
    pub http: HttpVersion,
    /// Extra PEM CA certificates to trust.
    pub ca_cert: Option<PathBuf>,
    /// Skip certificate verification (recorded in the manifest).
    pub insecure: bool,
    /// Measured requests (None: until `duration`).
    pub requests: Option<u64>,
    /// Warmup requests sent first, recorded with phase=warmup.
    pub warmup: u64,
    /// Stop sending after this long (measured from the first request).
    pub duration: Option<Duration>,
    /// Prompt source.
    pub prompts: PromptSource,
    /// `max_tokens` of every request.
    pub max_tokens: Option<u32>,
    /// Send `ignore_eos: true` so the server generates exactly `max_tokens`.
    pub ignore_eos: bool,
    /// JSON object merged into every request body (overrides generated keys).
    pub extra_body: Option<serde_json::Map<String, serde_json::Value>>,
    /// Ask for `stream_options.include_usage`.
    pub include_usage: bool,
    /// Ask for `stream_options.continuous_usage_stats` (usage on every chunk).
    pub continuous_usage: bool,
    /// Seed of every random choice.
    pub seed: u64,
    /// Closed or open loop.
    pub load: Load,
    /// Whole-request timeout.
    pub timeout: Option<Duration>,
    /// Timeout until the first output event.
    pub ttft_timeout: Option<Duration>,
    /// Grace period for in-flight requests after an interrupt or the end of `duration`.
    pub grace: Duration,
    /// How often a request still streaming hands its new chunks to the writer, so that a
    /// killed recorder loses at most this much (plus the writer's block age) of it. None: only
    /// finished requests are written.
    pub checkpoint_every: Option<Duration>,
    /// zstd level of the trace's blocks ([`DEFAULT_ZSTD_LEVEL`] unless asked otherwise).
    pub zstd_level: i32,
    /// Text capture mode.
    pub capture: Capture,
    /// Longest SSE line accepted.
    pub line_limit: usize,
    /// Manifest labels.
    pub labels: BTreeMap<String, String>,
    /// Command line as typed (redacted before it is stored).
    pub argv: Vec<String>,
    /// Trace file to write.
    pub output: PathBuf,
    /// Replace `output` when it is an existing file (otherwise the run refuses to start, so no
    /// earlier trace is lost to a repeated command line).
    pub overwrite: bool,
    /// Progress display.
    pub progress: ProgressMode,
    /// Tokio worker threads.
    pub threads: usize,
    /// Trial number written into every request.
    pub trial: u32,
    /// Stop on Ctrl-C (the CLI sets this; in-process callers may not want it).
    pub handle_ctrl_c: bool,
    /// This process's share of a sharded run (docs/SCALE.md).
    pub shard: crate::shard::ShardPlan,
    /// Wait until this wall-clock instant (ns since the Unix epoch) before sending; required
    /// for a sharded run, so that every shard's schedule starts at the same instant.
    pub start_at_realtime_ns: Option<u64>,
    /// The id all shards of a run share (None: derived from the plan).
    pub run_id: Option<String>,
    /// The client of the measured requests.
    pub client: ClientKind,
}

/// The default of [`RecordConfig::checkpoint_every`]: with the writer's 1 s block age, a
/// chunk is on disk at most about 1.5 s after it arrived.
pub const DEFAULT_CHECKPOINT_EVERY: Duration = Duration::from_millis(500);

/// The default of [`RecordConfig::zstd_level`]. The recorder shares its host's CPU with the
/// load it measures, so its trace is compressed at zstd's fastest positive level: about a
/// third less writer CPU than level 3 for about 3% larger traces
/// (docs/performance/2026-12-02-to-03.md, *zstd level 1 while recording*). Tools that rewrite a
/// trace offline (merge, redact) keep the writer's own default, level 3.
pub const DEFAULT_ZSTD_LEVEL: i32 = 1;

impl RecordConfig {
    /// The client the measured requests take: the one asked for, except that HTTP/2
    /// (`--http 2`) always goes through hyper.
    pub fn effective_client(&self) -> ClientKind {
        match (self.client, self.http) {
            (ClientKind::Own | ClientKind::OwnTask, HttpVersion::Http2) => ClientKind::Hyper,
            (client, _) => client,
        }
    }

    /// A configuration with defaults for everything but the target and the output.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>, output: PathBuf) -> Self {
        RecordConfig {
            base_url: base_url.into(),
            api: Api::Chat,
            model: model.into(),
            api_key: None,
            headers: Vec::new(),
            request_id_header: Some("x-request-id".into()),
            no_calibrate: false,
            http: HttpVersion::Auto,
            ca_cert: None,
            insecure: false,
            requests: Some(100),
            warmup: 0,
            duration: None,
            prompts: PromptSource::Synthetic { input_tokens: 128 },
            max_tokens: Some(128),
            ignore_eos: false,
            extra_body: None,
            include_usage: true,
            continuous_usage: true,
            seed: 0,
            load: Load::Closed { concurrency: 1 },
            timeout: None,
            ttft_timeout: None,
            grace: Duration::from_secs(5),
            checkpoint_every: Some(DEFAULT_CHECKPOINT_EVERY),
            zstd_level: DEFAULT_ZSTD_LEVEL,
            capture: Capture::None,
            line_limit: tokentrace_sse::parser::DEFAULT_LINE_LIMIT,
            labels: BTreeMap::new(),
            argv: Vec::new(),
            output,
            overwrite: false,
            progress: ProgressMode::Off,
            threads: 2,
            trial: 0,
            handle_ctrl_c: false,
            shard: crate::shard::ShardPlan::SINGLE,
            start_at_realtime_ns: None,
            run_id: None,
            client: ClientKind::Own,
        }
    }
}
