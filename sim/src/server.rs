//! The HTTP server (HTTP/1.1 and h2c) and the in-process handles to start and stop it.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc::Sender, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::{mpsc as tmpsc, oneshot};
use tokio::task::JoinSet;

use crate::body::{SimBody, SseStream};
use crate::chunk::ChunkTemplate;
use crate::config::SimConfig;
use crate::engine::{spawn_engine, EngineParams, Job, Sink};
use crate::fault::{plan_faults, HttpFault};
use crate::prefix::{fnv1a, fnv1a_start, PrefixCache};
use crate::request::{parse_request, Api, ParsedRequest};
use crate::truth::{TruthLog, TruthSender};

/// Largest request body accepted.
const MAX_REQUEST_BYTES: usize = 64 << 20;
/// Blocks the prefix cache remembers before it starts over.
const PREFIX_CACHE_BLOCKS: usize = 1 << 20;

struct State {
    config: SimConfig,
    jobs: Sender<Job>,
    arrivals: AtomicU64,
    truth: Option<TruthSender>,
    prefix_cache: Option<Mutex<PrefixCache>>,
}

/// A running simulator on the current tokio runtime.
pub struct SimServer {
    local_addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    accept: Option<tokio::task::JoinHandle<()>>,
    engine: Option<JoinHandle<()>>,
    truth: Option<TruthLog>,
}

impl SimServer {
    /// Binds `addr` (port 0 picks a free port) and starts serving on the current runtime.
    pub async fn start(config: SimConfig, addr: SocketAddr) -> io::Result<SimServer> {
        let listener = TcpListener::bind(addr).await?;
        let local_addr = listener.local_addr()?;
        let (truth, truth_tx) = match &config.truth_log {
            Some(path) => {
                let (log, tx) = TruthLog::create(path)?;
                (Some(log), Some(tx))
            }
            None => (None, None),
        };
        let (jobs, engine) = spawn_engine(EngineParams::from_config(&config))?;
        let prefix_cache = config.prefix_cache.then(|| {
            Mutex::new(PrefixCache::new(
                config.prefix_cache_block,
                PREFIX_CACHE_BLOCKS,
            ))
        });
        let state = Arc::new(State {
            config,
            jobs,
            arrivals: AtomicU64::new(0),
            truth: truth_tx,
            prefix_cache,
        });
        let (stop, stop_rx) = oneshot::channel();
        let accept = tokio::spawn(accept_loop(listener, state, stop_rx));
        Ok(SimServer {
            local_addr,
            stop: Some(stop),
            accept: Some(accept),
            engine: Some(engine),
            truth,
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Closes every connection, stops the engine and flushes the truth log.
    pub async fn shutdown(mut self) -> io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(accept) = self.accept.take() {
            let _ = accept.await;
        }
        // The engine ends once the last connection (holding the job sender) is gone, and the
        // truth log once the last response body is gone.
        let engine = self.engine.take();
        let truth = self.truth.take();
        tokio::task::spawn_blocking(move || {
            if let Some(engine) = engine {
                let _ = engine.join();
            }
            truth.map_or(Ok(()), TruthLog::finish)
        })
        .await
        .map_err(io::Error::other)?
    }

    /// Starts a simulator on its own thread and runtime, bound to 127.0.0.1 on a free port.
    pub fn spawn_background(config: SimConfig) -> io::Result<SimHandle> {
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("tokentrace-sim".into())
            .spawn(move || -> io::Result<()> {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build();
                let runtime = match runtime {
                    Ok(rt) => rt,
                    Err(err) => {
                        let _ = addr_tx.send(Err(err));
                        return Ok(());
                    }
                };
                runtime.block_on(async move {
                    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
                    match SimServer::start(config, loopback).await {
                        Ok(server) => {
                            let _ = addr_tx.send(Ok(server.local_addr()));
                            let _ = stop_rx.await;
                            server.shutdown().await
                        }
                        Err(err) => {
                            let _ = addr_tx.send(Err(err));
                            Ok(())
                        }
                    }
                })
            })?;
        let addr = addr_rx
            .recv()
            .map_err(|_| io::Error::other("simulator thread ended before binding"))??;
        Ok(SimHandle {
            addr,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }
}

impl Drop for SimServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A simulator running on its own thread; dropping it stops it.
pub struct SimHandle {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl SimHandle {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The OpenAI base URL, `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Stops the server and waits until the truth log is flushed.
    pub fn shutdown(mut self) -> io::Result<()> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.thread.take() {
            Some(thread) => thread
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("simulator thread panicked"))),
            None => Ok(()),
        }
    }
}

impl Drop for SimHandle {
    fn drop(&mut self) {
        let _ = self.stop_and_join();
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<State>, mut stop: oneshot::Receiver<()>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stop => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    Err(_) => {
                        // Out of descriptors or similar: back off instead of spinning.
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let socket = stream.as_raw_fd();
                let state = state.clone();
                connections.spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(handle(state, socket, req).await) }
                    });
                    let mut builder = auto::Builder::new(TokioExecutor::new());
                    builder.http1().timer(TokioTimer::new());
                    let _ = builder.serve_connection(TokioIo::new(stream), service).await;
                });
            }
        }
    }
    connections.shutdown().await;
}

async fn handle(state: Arc<State>, socket: RawFd, req: Request<Incoming>) -> Response<SimBody> {
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/health") => Response::new(SimBody::whole(Bytes::new())),
        (&Method::GET, "/v1/models") => {
            let body = json!({"object": "list", "data": [{
                "id": state.config.model, "object": "model", "created": 0,
                "owned_by": "tokentrace-sim"}]});
            json_response(StatusCode::OK, body.to_string())
        }
        (&Method::POST, "/v1/chat/completions") => completion(&state, socket, req, Api::Chat).await,
        (&Method::POST, "/v1/completions") => {
            completion(&state, socket, req, Api::Completions).await
        }
        _ => error_response(StatusCode::NOT_FOUND, "NotFoundError", "no such route"),
    }
}

fn json_response(status: StatusCode, body: impl Into<Bytes>) -> Response<SimBody> {
    let mut response = Response::new(SimBody::whole(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn error_response(status: StatusCode, kind: &str, message: &str) -> Response<SimBody> {
    let body = json!({"error": {"message": message, "type": kind, "param": null,
                                "code": status.as_u16()}});
    json_response(status, body.to_string())
}

async fn completion(
    state: &State,
    socket: RawFd,
    req: Request<Incoming>,
    api: Api,
) -> Response<SimBody> {
    let header_id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = match Limited::new(req.into_body(), MAX_REQUEST_BYTES)
        .collect()
        .await
    {
        Ok(collected) => collected.to_bytes(),
        Err(err) => {
            return error_response(StatusCode::BAD_REQUEST, "BadRequestError", &err.to_string())
        }
    };
    let arrival = state.arrivals.fetch_add(1, Ordering::Relaxed) + 1;
    let config = &state.config;
    let parsed = match parse_request(api, &body, config.chat_tokens_per_message) {
        Ok(parsed) => parsed,
        Err(err) => {
            return error_response(StatusCode::BAD_REQUEST, "BadRequestError", &err.to_string())
        }
    };
    let request_id = header_id.unwrap_or_else(|| format!("sim-{arrival}"));
    let seed = fnv1a(
        fnv1a(fnv1a_start() ^ config.seed, &body),
        request_id.as_bytes(),
    );
    let mut rng = StdRng::seed_from_u64(seed);
    let faults = plan_faults(&config.faults, arrival, &mut rng);
    let mut response = match faults.http {
        Some(fault) => http_fault(fault),
        None => {
            let cached = match &state.prefix_cache {
                Some(cache) => match cache.lock() {
                    Ok(mut cache) => {
                        cache.lookup_and_insert(&parsed.prompt_words, parsed.prompt_tokens)
                    }
                    Err(_) => 0,
                },
                None => 0,
            };
            let job_parts = plan_job(config, &parsed, cached, rng, faults);
            run_job(state, socket, &parsed, &request_id, job_parts).await
        }
    };
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert("x-request-id", value);
    }
    response
}

fn http_fault(fault: HttpFault) -> Response<SimBody> {
    let (status, kind) = match fault {
        HttpFault::TooManyRequests => (StatusCode::TOO_MANY_REQUESTS, "RateLimitError"),
        HttpFault::Internal => (StatusCode::INTERNAL_SERVER_ERROR, "InternalServerError"),
        HttpFault::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailableError"),
    };
    let mut response = error_response(status, kind, "injected fault");
    if fault == HttpFault::TooManyRequests {
        response
            .headers_mut()
            .insert("retry-after", HeaderValue::from_static("1"));
    }
    debug_assert_eq!(status.as_u16(), fault.status());
    response
}

/// A job without its sink: everything decided before the engine sees the request.
fn plan_job(
    config: &SimConfig,
    parsed: &ParsedRequest,
    cached_tokens: u32,
    mut rng: StdRng,
    faults: crate::fault::FaultPlan,
) -> impl FnOnce(Sink) -> Job {
    let max_tokens = parsed.max_tokens.unwrap_or(config.default_max_tokens);
    let reasoning = if parsed.api == Api::Chat && parsed.thinking {
        config.reasoning_tokens
    } else {
        0
    };
    let spread = config.eos_tokens_spread.clamp(0.0, 1.0);
    let factor = 1.0 + spread * (2.0 * rng.gen::<f64>() - 1.0);
    let content = ((f64::from(config.eos_tokens_mean) * factor).round() as u32).max(1);
    let wanted = reasoning.saturating_add(content);
    let (completion_target, finish_reason) = if parsed.ignore_eos || wanted > max_tokens {
        (max_tokens, "length")
    } else {
        (wanted, "stop")
    };
    let id_prefix = match parsed.api {
        Api::Chat => "chatcmpl",
        Api::Completions => "cmpl",
    };
    let id = format!("{id_prefix}-{:016x}", rng.gen::<u64>());
    let created = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let model = parsed.model.clone().unwrap_or_else(|| config.model.clone());
    let reasoning_key = config.reasoning_field.key();
    let template = ChunkTemplate::new(parsed.api, &id, created, &model, reasoning_key);
    let api = parsed.api;
    let prompt_tokens = parsed.prompt_tokens;
    let (include_usage, continuous_usage) = (parsed.include_usage, parsed.continuous_usage);
    move |sink| Job {
        api,
        id,
        created,
        model,
        template,
        reasoning_key,
        prompt_tokens,
        cached_tokens,
        reasoning_target: reasoning.min(completion_target),
        completion_target,
        finish_reason,
        include_usage,
        continuous_usage,
        faults,
        rng,
        sink,
    }
}

async fn run_job(
    state: &State,
    socket: RawFd,
    parsed: &ParsedRequest,
    request_id: &str,
    make_job: impl FnOnce(Sink) -> Job,
) -> Response<SimBody> {
    let unavailable = || {
        error_response(
            StatusCode::SERVICE_UNAVAILABLE,
            "EngineError",
            "engine stopped",
        )
    };
    if !parsed.stream {
        let (tx, rx) = oneshot::channel();
        if state.jobs.send(make_job(Sink::Whole(tx))).is_err() {
            return unavailable();
        }
        return match rx.await {
            Ok(body) => json_response(StatusCode::OK, body),
            Err(_) => unavailable(),
        };
    }
    let (tx, rx) = tmpsc::unbounded_channel();
    if state.jobs.send(make_job(Sink::Stream(tx))).is_err() {
        return unavailable();
    }
    let truth = state.truth.as_ref().map(|tx| {
        let id_json: Arc<str> = serde_json::Value::from(request_id).to_string().into();
        (tx.clone(), id_json)
    });
    let stream = SseStream {
        rx,
        truth,
        chunk_index: 0,
        stall: None,
        socket,
    };
    let mut response = Response::new(SimBody::Stream(Box::new(stream)));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert("cache-control", HeaderValue::from_static("no-cache"));
    response
}
