//! A whole recording run: check the config, reach the target, calibrate prompts, open the trace,
//! drive the load, handle Ctrl-C, and finish the trace with the client's health.

use crate::calibrate::{calibrate, Method};
use crate::config::{Api, ClientKind, Load, ProgressMode, PromptSource, RecordConfig};
use crate::error::RecordError;
use crate::health::{process_usage, LagProbe, LAG_TICK};
use crate::http::{build_fresh_client, build_watched_client, fetch, request_headers, HttpClient};
use crate::load::{drive, LoadShared, PromptPlan};
use crate::progress::{display, LiveStats};
use crate::read_clock::CloseWatch;
use crate::stream::StreamContext;
use http_body_util::Full;
use hyper::header::{HeaderMap, HeaderName};
use hyper::{Request, Uri};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokentrace_format::{
    realtime_now_ns, ClientHealth, Header, Outcome, RequestIdHeader, RunEnd, TraceWriter,
    WriterConfig, WriterStats,
};

/// What a finished run reports back.
#[derive(Debug, Clone)]
pub struct RunSummary {
    /// The trace written.
    pub output: PathBuf,
    /// Requests recorded (warmup included).
    pub requests: u64,
    /// Requests per outcome name (only outcomes that occurred).
    pub outcomes: BTreeMap<String, u64>,
    /// Chunks recorded.
    pub chunks: u64,
    /// Why the run stopped: `completed`, `duration`, `interrupted`.
    pub reason: String,
    /// The writer's statistics.
    pub writer: WriterStats,
    /// The client's health, as stored in the trace's RunEnd.
    pub client_health: ClientHealth,
    /// Words per synthetic prompt chosen by calibration.
    pub calibrated_words: Option<u32>,
}

/// What a thread of [`run`]'s runtime calls each time it runs out of work and parks, when the
/// program sets one ([`on_runtime_idle`]).
static ON_IDLE: OnceLock<fn()> = OnceLock::new();

/// Has every thread of [`run`]'s runtime call `hook` as it parks: for the program that chose
/// the allocator to hand an idle thread's freed memory back (the tokentrace programs do,
/// `src/common.rs`). A runtime thread does most of its allocating in bursts (connections,
/// TLS handshakes, first requests) and then may sleep for the rest of the run. Set once per
/// process; false when a hook was set already.
pub fn on_runtime_idle(hook: fn()) -> bool {
    ON_IDLE.set(hook).is_ok()
}

fn parked() {
    if let Some(hook) = ON_IDLE.get() {
        hook();
    }
}

/// Run a recording on a runtime of its own (for callers outside any async context).
pub fn run(config: RecordConfig) -> Result<RunSummary, RecordError> {
    // One thread: a current-thread runtime skips the work-stealing machinery entirely.
    let runtime = if config.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .on_thread_park(parked)
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(config.threads)
            .thread_name("tokentrace-record")
            .enable_all()
            .on_thread_park(parked)
            .build()?
    };
    runtime.block_on(run_async(config))
}

/// Run a recording on the current tokio runtime.
pub async fn run_async(config: RecordConfig) -> Result<RunSummary, RecordError> {
    validate(&config)?;
    let closes = CloseWatch::default();
    let client = build_watched_client(&config, closes.clone())?;
    let headers = request_headers(&config)?;
    let request_id = request_id_header(&config, &headers)?;
    let base = config.base_url.trim_end_matches('/').to_string();
    let endpoint = match config.api {
        Api::Chat => "chat/completions",
        Api::Completions => "completions",
    };
    let uri: Uri = format!("{base}/{endpoint}")
        .parse()
        .map_err(|e| RecordError::Config(format!("--url {base}: {e}")))?;
    // No answer to a small GET within 15 s (or the run's own request timeout, when shorter)
    // means no answer to the load either.
    let preflight_limit = config
        .timeout
        .map_or(PREFLIGHT_TIMEOUT, |t| t.min(PREFLIGHT_TIMEOUT));
    preflight(&client, &base, &headers, preflight_limit).await?;
    // What the server says about itself (bounded, never fails the run).
    let server_info = crate::server_info::fetch(&client, &base, &headers).await;

    let anchor = crate::shard_start::anchor(config.start_at_realtime_ns);
    let chunk_capacity = config.max_tokens.map_or(256, |m| m as usize + 8).min(4096);
    let mut ctx = StreamContext {
        client,
        fresh_client: build_fresh_client(&config)?,
        closes: closes.clone(),
        uri,
        headers,
        request_id: request_id
            .as_ref()
            .map(|(name, id)| (name.clone(), id.run_prefix)),
        anchor_mono_ns: anchor.mono_ns,
        timeout: config.timeout,
        ttft_timeout: config.ttft_timeout,
        capture: config.capture,
        line_limit: config.line_limit,
        trial: config.trial,
        chunk_capacity,
        // Set once the trace exists; calibration probes are not part of it.
        checkpoints: None,
        // Set once calibration is done: its probes go through hyper.
        own: None,
        // Set once the trace exists, with the own client.
        reader: None,
        events_read_whole: Default::default(),
        http2_responses: Default::default(),
    };
    let (prompts, calibration) = match &config.prompts {
        PromptSource::Synthetic { input_tokens } => {
            let c = calibrate(&ctx, &config, *input_tokens).await?;
            if c.method != Method::Usage && config.progress != ProgressMode::Off {
                for note in &c.notes {
                    eprintln!("calibration: {note}");
                }
                eprintln!(
                    "calibration: {} words per prompt by {}",
                    c.words,
                    c.method.name()
                );
            }
            let plan = PromptPlan::Synthetic {
                words: c.words,
                input_tokens: *input_tokens,
            };
            (plan, Some(c))
        }
        PromptSource::File(path) => (
            PromptPlan::from_file(
                &config,
                crate::prompts::load_file(path, config.api == Api::Chat)?,
            ),
            None,
        ),
    };
    let client = config.effective_client();
    if matches!(client, ClientKind::Own | ClientKind::OwnTask) {
        let mut tls = crate::http::tls_config(&config)?;
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let pool = crate::h1::Pool::new(&ctx.uri, &ctx.headers, Some(Arc::new(tls)))?;
        ctx.own = Some(Arc::new(pool));
    }
    // A sharded run's schedule starts at the agreed instant, whenever this shard got ready.
    let started = crate::shard_start::wait(&ctx, config.start_at_realtime_ns, &anchor).await;
    let start_realtime_ns = realtime_now_ns();
    let mut manifest = crate::manifest::build(
        &config,
        calibration.as_ref().map(|c| c.words),
        start_realtime_ns,
    );
    manifest.request_id_header = request_id.map(|(_, id)| id);
    manifest.shard = crate::shard_start::info(&config, &started);
    manifest
        .extra
        .insert("http_client".into(), client.name().into());
    crate::server_info::ServerInfo::store(server_info.as_ref(), &mut manifest);
    if let Some(c) = &calibration {
        manifest
            .extra
            .insert("calibration".into(), c.manifest_entry());
    }
    let header = Header {
        major: tokentrace_format::frame::FORMAT_MAJOR,
        minor: tokentrace_format::frame::FORMAT_MINOR,
        anchor,
        host: host_name(),
        shard: config.shard.index,
    };
    let writer_config = WriterConfig {
        zstd_level: config.zstd_level,
        ..WriterConfig::default()
    };
    let writer = TraceWriter::create(&config.output, header, &manifest, writer_config)?;
    ctx.checkpoints = config
        .checkpoint_every
        .map(|every| (writer.sender(), every));
    // The calibration probes' events are not the trace's.
    ctx.events_read_whole.store(0, Ordering::Relaxed);
    ctx.http2_responses.store(0, Ordering::Relaxed);
    if client == ClientKind::Own {
        // The reader's copy of the context has no reader: the last handle, dropped with the
        // run's shared state below, stops the thread.
        let ticking = ctx.checkpoints.is_some();
        let reader = crate::reader::Reader::spawn(ctx.clone(), ticking)
            .map_err(|e| RecordError::Config(format!("starting the stream reader: {e}")))?;
        ctx.reader = Some(Arc::new(reader));
    }

    let stats = Arc::new(LiveStats::default());
    let (lag, lag_ticker) = LagProbe::spawn(LAG_TICK);
    let usage_before = process_usage();
    let start_ns = started.start_ns;
    let shared = Arc::new(LoadShared {
        deadline_ns: config.duration.map(|d| start_ns + d.as_nanos() as u64),
        sender: writer.sender(),
        stats: stats.clone(),
        stop: AtomicBool::new(false),
        stop_notify: Default::default(),
        cancels: Mutex::new(Default::default()),
        next_id: AtomicU64::new(0),
        start_ns,
        hit_deadline: AtomicBool::new(false),
        warmup_left: AtomicU64::new(config.shard.share(config.warmup)),
        warmup_notify: Default::default(),
        outcomes: Default::default(),
        write_error: Mutex::new(None),
        unqueued: Mutex::new(Vec::new()),
        prompts,
        ctx,
        config: config.clone(),
    });
    let (progress_stop, progress_rx) = tokio::sync::oneshot::channel();
    let progress = tokio::spawn(display(
        stats.clone(),
        config.progress,
        shared.total_requests(),
        progress_rx,
    ));

    let mut interrupts = Interrupts::new(config.handle_ctrl_c);
    let mut work = tokio::spawn(drive(shared.clone()));
    let interrupted = tokio::select! {
        _ = &mut work => false,
        () = interrupts.next() => true,
    };
    if interrupted {
        shared.request_stop();
        let grace = tokio::time::sleep(config.grace);
        tokio::pin!(grace);
        // A second signal cuts the grace short; the trace is finished all the same.
        let drained = tokio::select! {
            _ = &mut work => true,
            () = &mut grace => false,
            () = interrupts.next() => false,
        };
        if !drained {
            // Sweep until every task has ended: a request may register after a sweep.
            loop {
                shared.cancel_in_flight();
                if tokio::time::timeout(Duration::from_millis(100), &mut work)
                    .await
                    .is_ok()
                {
                    break;
                }
            }
        }
    }
    let _ = progress_stop.send(());
    let _ = progress.await;

    lag_ticker.abort();
    let usage_after = process_usage();
    let end_ns = shared.ctx.now_ns();
    let reason = if interrupted {
        "interrupted".to_string()
    } else if let Some(err) = shared.write_error.lock().ok().and_then(|e| e.clone()) {
        format!("error: {err}")
    } else if shared.hit_deadline.load(Ordering::SeqCst) {
        "duration".to_string()
    } else {
        "completed".to_string()
    };
    let chunks = stats.chunks.load(Ordering::Relaxed);
    let reads = stats.reads.load(Ordering::Relaxed);
    let cpu_ns = usage_after.cpu_ns.saturating_sub(usage_before.cpu_ns);
    let user_ns = usage_after.user_ns.saturating_sub(usage_before.user_ns);
    let concurrency = match config.load {
        Load::Closed { concurrency } => Some(concurrency as u64),
        Load::Open { .. } => None,
    };
    let health = ClientHealth {
        cpu_ns: Some(cpu_ns),
        cpu_user_ns: Some(user_ns),
        cpu_system_ns: Some(cpu_ns.saturating_sub(user_ns)),
        cpu_ns_per_chunk: cpu_ns.checked_div(chunks),
        max_rss_bytes: Some(usage_after.max_rss_bytes),
        rss_before_load_bytes: Some(usage_before.max_rss_bytes),
        max_sched_lag_ns: Some(lag.max_lag_ns()),
        late_ticks: Some(lag.late_ticks()),
        ticks: Some(lag.ticks()),
        tick_ns: Some(LAG_TICK.as_nanos() as u64),
        backpressure_events: Some(shared.sender.backpressure_events()),
        chunks: Some(chunks),
        reads: Some(reads),
        wall_ns: Some(end_ns.saturating_sub(start_ns)),
        worker_threads: Some(config.threads as u64),
        concurrency,
        // Whether the recorder stopped reusing connections because the server closed them
        // right after its responses (docs/ENGINES.md, llama-server).
        server_closes_after_response: Some(closes.closed_after_response()),
        reader_sent_requests: Some(stats.reader_sent.load(Ordering::Relaxed)),
        events_read_whole: Some(shared.ctx.events_read_whole.load(Ordering::Relaxed)),
        http2_responses: Some(shared.ctx.http2_responses.load(Ordering::Relaxed)),
        ..ClientHealth::default()
    };
    let end = RunEnd {
        end_realtime_ns: realtime_now_ns(),
        end_ns,
        reason: reason.clone(),
        client_health: health.clone(),
    };
    let outcomes: BTreeMap<String, u64> = Outcome::ALL
        .iter()
        .map(|o| {
            (
                o.name().to_string(),
                shared.outcomes[*o as usize].load(Ordering::Relaxed),
            )
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    drop(shared);
    let writer_stats = writer.finish(end)?;
    Ok(RunSummary {
        output: config.output.clone(),
        requests: writer_stats.requests,
        outcomes,
        chunks,
        reason,
        writer: writer_stats,
        client_health: health,
        calibrated_words: calibration.map(|c| c.words),
    })
}

/// The signals that stop a run the way Ctrl-C does: SIGINT, SIGTERM (sent by Kubernetes,
/// Docker, systemd, CI cancellation and `timeout`) and SIGHUP (a closed terminal). The
/// handlers are installed once, before the load starts, so no signal finds the default
/// disposition (which would end the process with the trace unfinished).
struct Interrupts {
    #[cfg(unix)]
    signals: Option<[tokio::signal::unix::Signal; 3]>,
    #[cfg(not(unix))]
    enabled: bool,
}

impl Interrupts {
    /// Installs the handlers when `enabled`; otherwise [`Interrupts::next`] never resolves.
    fn new(enabled: bool) -> Interrupts {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let signals = enabled
                .then(|| {
                    Some([
                        signal(SignalKind::interrupt()).ok()?,
                        signal(SignalKind::terminate()).ok()?,
                        signal(SignalKind::hangup()).ok()?,
                    ])
                })
                .flatten();
            Interrupts { signals }
        }
        #[cfg(not(unix))]
        Interrupts { enabled }
    }

    /// Resolves at the next signal.
    async fn next(&mut self) {
        #[cfg(unix)]
        if let Some([int, term, hup]) = &mut self.signals {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
                _ = hup.recv() => {}
            }
            return;
        }
        #[cfg(not(unix))]
        if self.enabled && tokio::signal::ctrl_c().await.is_ok() {
            return;
        }
        std::future::pending::<()>().await
    }
}

fn validate(config: &RecordConfig) -> Result<(), RecordError> {
    let bad = |m: &str| Err(RecordError::Config(m.to_string()));
    if !(config.base_url.starts_with("http://") || config.base_url.starts_with("https://")) {
        return bad("--url must start with http:// or https://");
    }
    let base = config.base_url.trim_end_matches('/');
    for endpoint in ["/chat/completions", "/completions", "/models"] {
        if let Some(stem) = base.strip_suffix(endpoint) {
            return Err(RecordError::Config(format!(
                "--url {base} names an endpoint; give the API's base URL instead: --url {stem} \
                 (tokentrace adds {endpoint} itself)"
            )));
        }
    }
    if config.requests.is_none() && config.duration.is_none() {
        return bad("give --requests or --duration (or both)");
    }
    crate::shard_start::validate(config).map_err(RecordError::Config)?;

    match config.load {
        Load::Closed { concurrency: 0 } => return bad("--concurrency must be at least 1"),
        Load::Open { rate, arrival } => {
            if !(rate.is_finite() && rate > 0.0) {
                return bad("--rate must be a positive number");
            }
            if let crate::config::Arrival::Gamma { burstiness } = arrival {
                if !(burstiness.is_finite() && burstiness > 0.0) {
                    return bad("--burstiness must be a positive number");
                }
            }
        }
        Load::Closed { .. } => {}
    }
    if !config.overwrite && config.output.is_file() {
        return Err(RecordError::Config(format!(
            "{} exists; give --force to replace it, or another -o",
            config.output.display()
        )));
    }
    if config.line_limit < 64 {
        return bad("the SSE line limit must be at least 64 bytes");
    }
    Ok(())
}

/// The header that carries request ids, unless the user sends that header themselves.
fn request_id_header(
    config: &RecordConfig,
    headers: &HeaderMap,
) -> Result<Option<(HeaderName, RequestIdHeader)>, RecordError> {
    let Some(name) = &config.request_id_header else {
        return Ok(None);
    };
    let name = HeaderName::from_bytes(name.trim().as_bytes())
        .map_err(|_| RecordError::Config(format!("--request-id-header: invalid name {name:?}")))?;
    if headers.contains_key(&name) {
        return Ok(None);
    }
    // Shards share their run's prefix, so ids (unique across shards by the split) stay
    // unique as UUIDs too; a single process draws one of its own.
    let run_prefix = match crate::shard_start::run_id(config) {
        Some(run_id) => xxhash_rust::xxh3::xxh3_64(run_id.as_bytes()),
        None => xxhash_rust::xxh3::xxh3_64(
            format!(
                "{}/{}/{}",
                realtime_now_ns(),
                std::process::id(),
                host_name()
            )
            .as_bytes(),
        ),
    };
    let id = RequestIdHeader {
        name: name.as_str().to_string(),
        run_prefix,
    };
    Ok(Some((name, id)))
}

/// Reach the target once before anything is recorded: an HTTP answer to `GET {base}/models`
/// proves the connection (and TLS) work; a transport failure stops the run. A 404 there most
/// often means a base URL without its `/v1` (or with another version): when a corrected URL
/// answers, the run stops with that suggestion before any load is sent.
async fn preflight(
    client: &HttpClient,
    base: &str,
    headers: &HeaderMap,
    limit: Duration,
) -> Result<(), RecordError> {
    let status = get_status(client, base, headers, limit)
        .await?
        .map_err(RecordError::Unreachable)?;
    if status != 404 {
        return Ok(());
    }
    for candidate in base_url_candidates(base) {
        if let Ok(Ok(200..=299)) = get_status(client, &candidate, headers, limit).await {
            return Err(RecordError::Config(format!(
                "--url {base}: GET {base}/models answered HTTP 404, but {candidate}/models \
                 answers: use --url {candidate}"
            )));
        }
    }
    Ok(())
}

/// Base URLs a mistyped one may have meant: with `/v1` added, or with its last version
/// segment (`/v2`, `/v1beta`, …) replaced by `/v1`.
fn base_url_candidates(base: &str) -> Vec<String> {
    let mut candidates = Vec::new();
    let (stem, last) = base.rsplit_once('/').unwrap_or((base, ""));
    let is_version = last.starts_with('v') && last[1..].starts_with(|c: char| c.is_ascii_digit());
    if is_version && last != "v1" && !stem.ends_with('/') {
        candidates.push(format!("{stem}/v1"));
    }
    if last != "v1" {
        candidates.push(format!("{base}/v1"));
    }
    candidates
}

/// Longest wait for the preflight's answer.
const PREFLIGHT_TIMEOUT: Duration = Duration::from_secs(15);

/// The status of `GET {base}/models` within `limit` (the outer error: the URL does not parse;
/// the inner one: no answer).
async fn get_status(
    client: &HttpClient,
    base: &str,
    headers: &HeaderMap,
    limit: Duration,
) -> Result<Result<u16, String>, RecordError> {
    let uri: Uri = format!("{base}/models")
        .parse()
        .map_err(|e| RecordError::Config(format!("--url {base}: {e}")))?;
    let mut request = Request::new(Full::default());
    *request.uri_mut() = uri;
    *request.headers_mut() = headers.clone();
    request.headers_mut().remove("content-type");
    // The body is read (and dropped) so the connection returns to the pool.
    Ok(fetch(client, request, limit, 1 << 16)
        .await
        .map(|(status, _)| status))
}

fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its whole length; gethostname NUL-terminates within it
    // (or truncates, which the search for NUL below tolerates).
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    static PARKS: AtomicU64 = AtomicU64::new(0);

    fn count_park() {
        PARKS.fetch_add(1, Ordering::Relaxed);
    }

    #[test]
    fn the_runtime_calls_the_idle_hook_as_its_threads_park() {
        // A server that takes each connection and closes it: the requests fail at once, and the
        // runtime's threads park while they wait for the sockets.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for conn in listener.incoming().take(8) {
                drop(conn);
            }
        });
        let dir = tempfile::tempdir().unwrap();
        let mut config =
            RecordConfig::new(format!("http://{addr}/v1"), "m", dir.path().join("t.tt"));
        config.no_calibrate = true;
        config.requests = Some(2);
        assert!(on_runtime_idle(count_park));
        assert!(!on_runtime_idle(count_park), "set once per process");
        let _ = run(config);
        assert!(PARKS.load(Ordering::Relaxed) > 0);
    }

    #[test]
    fn candidate_base_urls() {
        assert_eq!(base_url_candidates("http://h:8000"), ["http://h:8000/v1"]);
        assert_eq!(
            base_url_candidates("http://h:8000/v2"),
            ["http://h:8000/v1", "http://h:8000/v2/v1"]
        );
        assert_eq!(
            base_url_candidates("http://h:8000/v1"),
            Vec::<String>::new()
        );
        assert_eq!(
            base_url_candidates("http://h/openai"),
            ["http://h/openai/v1"]
        );
    }
}
