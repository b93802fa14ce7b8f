//! Request routing and the completion endpoints: parse, plan (lengths, faults, envelope),
//! hand to the engine, answer with a stream or a whole body.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use tokio::sync::{mpsc as tmpsc, oneshot};

use crate::body::{SimBody, SseStream};
use crate::chunk::ChunkTemplate;
use crate::config::SimConfig;
use crate::engine::EngineHandle;
use crate::fault::{plan_faults, HttpFault};
use crate::job::{Job, Sink};
use crate::prefix::{fnv1a, fnv1a_start, PrefixCache};
use crate::request::{parse_request, Api, ParsedRequest};
use crate::truth::TruthSender;

/// Largest request body accepted.
const MAX_REQUEST_BYTES: usize = 64 << 20;

/// What every connection shares.
pub(crate) struct State {
    pub(crate) config: SimConfig,
    pub(crate) engine: EngineHandle,
    pub(crate) arrivals: AtomicU64,
    pub(crate) truth: Option<TruthSender>,
    pub(crate) prefix_cache: Option<Mutex<PrefixCache>>,
}

/// Answers one request.
pub(crate) async fn handle(
    state: Arc<State>,
    socket: RawFd,
    req: Request<Incoming>,
) -> Response<SimBody> {
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/health") => Response::new(SimBody::whole(Bytes::new())),
        (&Method::GET, "/v1/models") => {
            let body = json!({"object": "list", "data": [{
                "id": state.config.model, "object": "model", "created": 0,
                "owned_by": "tokentrace-sim"}]});
            json_response(StatusCode::OK, body.to_string())
        }
        (&Method::POST, "/tokenize") => tokenize(req).await,
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

/// A request body of at most [`MAX_REQUEST_BYTES`], or the 400 that refuses it.
async fn read_body(req: Request<Incoming>) -> Result<Bytes, Response<SimBody>> {
    match Limited::new(req.into_body(), MAX_REQUEST_BYTES)
        .collect()
        .await
    {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(err) => Err(error_response(
            StatusCode::BAD_REQUEST,
            "BadRequestError",
            &err.to_string(),
        )),
    }
}

/// llama.cpp's `POST /tokenize`: `{"content": text}` → `{"tokens": [...]}`, one token per
/// whitespace-separated word (the simulator's prompt token rule).
async fn tokenize(req: Request<Incoming>) -> Response<SimBody> {
    let body = match read_body(req).await {
        Ok(body) => body,
        Err(refusal) => return refusal,
    };
    let value: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let Some(text) = value.get("content").and_then(|c| c.as_str()) else {
        return error_response(
            StatusCode::BAD_REQUEST,
            "BadRequestError",
            "`content` must be a string",
        );
    };
    let tokens: Vec<usize> = (0..text.split_whitespace().count()).collect();
    json_response(StatusCode::OK, json!({ "tokens": tokens }).to_string())
}

/// Whether `text` is a UUID in its 8-4-4-4-12 hex form.
fn is_uuid(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups
            .iter()
            .all(|g| g.bytes().all(|b| b.is_ascii_hexdigit()))
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
    if state.config.uuid_request_ids && header_id.as_deref().is_some_and(|id| !is_uuid(id)) {
        let mut refused = Response::new(SimBody::whole(Bytes::new()));
        *refused.status_mut() = StatusCode::BAD_REQUEST;
        return refused;
    }
    let body = match read_body(req).await {
        Ok(body) => body,
        Err(refusal) => return refusal,
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
    let logprobs = parsed.logprobs;
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
        logprobs,
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
        if !state.engine.submit(make_job(Sink::Whole(Some(tx)))) {
            return unavailable();
        }
        return match rx.await {
            Ok(body) => json_response(StatusCode::OK, body),
            Err(_) => unavailable(),
        };
    }
    let (tx, rx) = tmpsc::unbounded_channel();
    if !state.engine.submit(make_job(Sink::Stream(tx))) {
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
        reset_due: false,
        socket,
    };
    let mut response = Response::new(SimBody::Stream(Box::new(stream)));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert("cache-control", HeaderValue::from_static("no-cache"));
    response
}
