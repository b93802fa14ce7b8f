//! Synthetic prompt calibration: how many words a prompt needs for the server to count
//! `target` input tokens, since local token estimates differ between tokenizers and chat
//! templates.
//!
//! Three strategies, tried in order until one works, so calibration never makes a run
//! impossible:
//! 1. probes: streamed one-token requests whose `usage.prompt_tokens` is the server's own count,
//!    chat template included;
//! 2. the server's tokenizer endpoint (`POST /tokenize` on llama.cpp, vLLM and SGLang), which
//!    counts the prompt text without the chat template;
//! 3. a local estimate of one token per word, recorded as such.
//!
//! Every strategy that failed leaves a note (status, URL, body) in the result and the manifest.

use crate::body;
use crate::config::RecordConfig;
use crate::error::RecordError;
use crate::http::fetch;
use crate::prompts::{synthetic, Prompt};
use crate::stream::{execute, RequestSpec, StreamContext};
use bytes::Bytes;
use http_body_util::Full;
use hyper::Request;
use serde_json::{json, Value};
use std::time::Duration;
use tokentrace_format::{Outcome, Phase};

/// Probe requests use ids from here on, far from any trace id, so server logs tell them apart
/// (and within the 62 id bits of the request UUID).
pub const PROBE_ID_BASE: u64 = 1 << 61;

/// Whole-request limit of one probe when the run sets none.
const PROBE_TIMEOUT: Duration = Duration::from_secs(120);

/// Longest wait for one tokenizer call.
const TOKENIZE_TIMEOUT: Duration = Duration::from_secs(30);

/// At most this many measurements per strategy.
const MAX_PROBES: usize = 5;

/// Answers to a probe that mean "not now" rather than "not like this": the probe is sent
/// again, up to [`PROBE_ATTEMPTS`] times, after the server's `Retry-After` (capped) or a
/// second.
const TRANSIENT_STATUS: [u16; 5] = [429, 500, 502, 503, 504];
const PROBE_ATTEMPTS: usize = 3;
const MAX_PROBE_BACKOFF: Duration = Duration::from_secs(5);

/// How the word count was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// The server's `usage.prompt_tokens` for probe requests.
    Usage,
    /// The server's `/tokenize` endpoint (prompt text without the chat template).
    Tokenize,
    /// One token per word, without asking the server.
    Estimate,
}

impl Method {
    /// The name used in the manifest.
    pub fn name(self) -> &'static str {
        match self {
            Method::Usage => "usage",
            Method::Tokenize => "tokenize",
            Method::Estimate => "estimate",
        }
    }
}

/// The result of calibration.
#[derive(Debug, Clone, PartialEq)]
pub struct Calibration {
    /// Words per synthetic prompt.
    pub words: u32,
    /// Tokens the server counted for the chosen length (None: not measured).
    pub measured_tokens: Option<u32>,
    /// (words, tokens) of every measurement of the strategy that decided.
    pub probes: Vec<(u32, u32)>,
    /// The strategy that decided.
    pub method: Method,
    /// Why earlier strategies were passed over, in order.
    pub notes: Vec<String>,
}

impl Calibration {
    /// The manifest's `calibration` entry.
    pub fn manifest_entry(&self) -> Value {
        json!({
            "method": self.method.name(),
            "probes": self.probes,
            "measured_prompt_tokens": self.measured_tokens,
            "notes": self.notes,
        })
    }
}

/// Why a strategy gave up.
enum Failure {
    /// The server cannot be reached at all: the run cannot go on either.
    Unreachable(String),
    /// The strategy does not work against this server; the next one is tried.
    Unusable(String),
}

/// Find the word count whose prompt the server counts as `target` tokens (within 1%).
pub async fn calibrate(
    ctx: &StreamContext,
    config: &RecordConfig,
    target: u32,
) -> Result<Calibration, RecordError> {
    if config.no_calibrate {
        return Ok(estimate(target, vec!["--no-calibrate".into()]));
    }
    let mut notes = Vec::new();
    match by_usage(ctx, config, target).await {
        Ok(found) => return Ok(found),
        Err(Failure::Unreachable(e)) => return Err(RecordError::Unreachable(e)),
        Err(Failure::Unusable(note)) => notes.push(note),
    }
    match by_tokenize(ctx, config, target).await {
        Ok(mut found) => {
            notes.append(&mut found.notes);
            found.notes = notes;
            return Ok(found);
        }
        Err(Failure::Unreachable(e)) => return Err(RecordError::Unreachable(e)),
        Err(Failure::Unusable(note)) => notes.push(note),
    }
    Ok(estimate(target, notes))
}

/// One token per word: the synthetic words are common English words, each one token in the
/// usual BPE vocabularies.
fn estimate(target: u32, notes: Vec<String>) -> Calibration {
    Calibration {
        words: target.max(1),
        measured_tokens: None,
        probes: Vec::new(),
        method: Method::Estimate,
        notes,
    }
}

/// Converges on the word count from (words, tokens) measurements.
struct Search {
    target: u32,
    words: u32,
    probes: Vec<(u32, u32)>,
}

impl Search {
    fn new(target: u32) -> Search {
        Search {
            target,
            words: target.max(1),
            probes: Vec::new(),
        }
    }

    /// Records a measurement of `self.words`; true when it is close enough.
    fn measured(&mut self, tokens: u32) -> bool {
        self.probes.push((self.words, tokens));
        let tolerance = (f64::from(self.target) * 0.01).max(1.0);
        if (f64::from(tokens) - f64::from(self.target)).abs() <= tolerance {
            return true;
        }
        self.words = next_guess(&self.probes, self.target);
        false
    }

    /// The closest measurement so far, as the result of `method`.
    fn best(self, method: Method) -> Option<Calibration> {
        let (words, tokens) = self
            .probes
            .iter()
            .min_by_key(|(_, t)| t.abs_diff(self.target))
            .copied()?;
        Some(Calibration {
            words,
            measured_tokens: Some(tokens),
            probes: self.probes,
            method,
            notes: Vec::new(),
        })
    }
}

async fn by_usage(
    ctx: &StreamContext,
    config: &RecordConfig,
    target: u32,
) -> Result<Calibration, Failure> {
    // Probes obey the run's timeouts (their prompts are as long as the run's, so a TTFT limit
    // too tight for them is too tight for the run), with a limit of their own when the run
    // sets none.
    let mut probe_ctx = ctx.clone();
    probe_ctx.timeout = Some(ctx.timeout.unwrap_or(PROBE_TIMEOUT));
    let mut search = Search::new(target);
    let mut notes = Vec::new();
    for attempt in 0..MAX_PROBES {
        let id = PROBE_ID_BASE + attempt as u64;
        match probe(&probe_ctx, config, id, search.words, &mut notes).await? {
            Some(tokens) => {
                if search.measured(tokens) {
                    break;
                }
            }
            None if attempt == 0 => {
                return Err(Failure::Unusable(format!(
                    "probe POST {}: the answer carried no usage.prompt_tokens",
                    ctx.uri
                )))
            }
            None => break,
        }
    }
    let mut found = search
        .best(Method::Usage)
        .ok_or_else(|| Failure::Unusable("no probe succeeded".into()))?;
    found.notes = notes;
    Ok(found)
}

/// One probe: a streamed request for one token; returns the server's prompt token count. A
/// transient refusal (429, 5xx gateway or overload) is asked again, with a note of it.
async fn probe(
    ctx: &StreamContext,
    config: &RecordConfig,
    id: u64,
    words: u32,
    notes: &mut Vec<String>,
) -> Result<Option<u32>, Failure> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let record = probe_once(ctx, config, id, words).await;
        let transient = record.meta.outcome == Outcome::HttpError
            && TRANSIENT_STATUS.contains(&record.meta.http_status);
        if !transient || attempt == PROBE_ATTEMPTS {
            return probe_result(ctx, record);
        }
        let wait = record
            .meta
            .response_headers
            .iter()
            .find(|(name, _)| name == "retry-after")
            .and_then(|(_, v)| v.trim().parse::<u64>().ok())
            .map_or(Duration::from_secs(1), Duration::from_secs)
            .min(MAX_PROBE_BACKOFF);
        notes.push(format!(
            "probe POST {} answered HTTP {}; asked again after {} ms",
            ctx.uri,
            record.meta.http_status,
            wait.as_millis()
        ));
        tokio::time::sleep(wait).await;
    }
}

async fn probe_once(
    ctx: &StreamContext,
    config: &RecordConfig,
    id: u64,
    words: u32,
) -> tokentrace_format::PackedRecord {
    let prompt = Prompt::Text(synthetic(config.seed, id, words));
    let spec = RequestSpec {
        id,
        phase: Phase::Warmup,
        intended_ns: ctx.now_ns(),
        body: Bytes::from(body::build(config, &prompt, Some(1))),
        prompt_hash: 0,
        prompt_bytes: 0,
        planned_input_tokens: None,
    };
    // Never cancelled: the sender lives until the probe ends.
    let (_keep, cancel) = tokio::sync::oneshot::channel();
    execute(ctx, spec, cancel, None).await
}

fn probe_result(
    ctx: &StreamContext,
    record: tokentrace_format::PackedRecord,
) -> Result<Option<u32>, Failure> {
    let error = record.meta.error.unwrap_or_default();
    match record.meta.outcome {
        Outcome::Ok | Outcome::MissingDone => Ok(record.meta.usage.prompt_tokens),
        Outcome::ConnectError => Err(Failure::Unreachable(error)),
        other => Err(Failure::Unusable(format!(
            "probe POST {} failed ({}): {error}",
            ctx.uri,
            other.name(),
        ))),
    }
}

/// Tokenizer endpoints, below the server's origin: `/tokenize` on llama.cpp, vLLM and SGLang,
/// `/extras/tokenize/count` on llama-cpp-python.
const TOKENIZE_PATHS: [&str; 2] = ["/tokenize", "/extras/tokenize/count"];

/// Calibrates against the first tokenizer endpoint that answers.
async fn by_tokenize(
    ctx: &StreamContext,
    config: &RecordConfig,
    target: u32,
) -> Result<Calibration, Failure> {
    let origin = config.base_url.trim_end_matches('/');
    let origin = origin.strip_suffix("/v1").unwrap_or(origin);
    let mut notes = Vec::new();
    for path in TOKENIZE_PATHS {
        match by_tokenize_at(ctx, config, target, &format!("{origin}{path}")).await {
            Ok(found) => return Ok(found),
            Err(Failure::Unreachable(e)) => return Err(Failure::Unreachable(e)),
            Err(Failure::Unusable(note)) => notes.push(note),
        }
    }
    Err(Failure::Unusable(notes.join("; ")))
}

/// Calibrates against one tokenizer endpoint. The body carries the field names of llama.cpp
/// (`content`), of vLLM and SGLang (`model`, `prompt`) and of llama-cpp-python (`input`); each
/// server reads its own and ignores the rest. The answer's `count` (vLLM, llama-cpp-python) or
/// the length of `tokens` (llama.cpp, vLLM, SGLang) is the count.
async fn by_tokenize_at(
    ctx: &StreamContext,
    config: &RecordConfig,
    target: u32,
    url: &str,
) -> Result<Calibration, Failure> {
    let uri: hyper::Uri = url
        .parse()
        .map_err(|e| Failure::Unusable(format!("{url}: {e}")))?;
    let timeout = ctx
        .timeout
        .map_or(TOKENIZE_TIMEOUT, |t| t.min(TOKENIZE_TIMEOUT));
    let mut search = Search::new(target);
    for attempt in 0..MAX_PROBES {
        let text = synthetic(config.seed, PROBE_ID_BASE + attempt as u64, search.words);
        let body = json!({"model": config.model, "prompt": text, "content": text, "input": text});
        let mut request = Request::new(Full::new(Bytes::from(body.to_string())));
        *request.method_mut() = hyper::Method::POST;
        *request.uri_mut() = uri.clone();
        *request.headers_mut() = ctx.headers.clone();
        let (status, body) = fetch(&ctx.client, request, timeout, 1 << 22)
            .await
            .map_err(|e| Failure::Unusable(format!("POST {e}")))?;
        if status >= 400 {
            return Err(Failure::Unusable(format!(
                "POST {url} answered HTTP {status}: {}",
                body_text(&body)
            )));
        }
        let tokens = token_count(&body).ok_or_else(|| {
            Failure::Unusable(format!(
                "POST {url}: the answer has neither `count` nor a `tokens` list: {}",
                body_text(&body)
            ))
        })?;
        if search.measured(tokens) {
            break;
        }
    }
    let mut found = search
        .best(Method::Tokenize)
        .ok_or_else(|| Failure::Unusable(format!("POST {url}: no answer")))?;
    if config.api == crate::config::Api::Chat {
        found
            .notes
            .push("counted by /tokenize without the chat template".into());
    }
    Ok(found)
}

/// Tokens in a `/tokenize` answer.
fn token_count(body: &[u8]) -> Option<u32> {
    let value: Value = serde_json::from_slice(body).ok()?;
    let count = match value.get("count").and_then(Value::as_u64) {
        Some(count) => count,
        None => value.get("tokens")?.as_array()?.len() as u64,
    };
    u32::try_from(count).ok()
}

/// A body for an error message: its first 200 bytes, or "empty body".
fn body_text(body: &[u8]) -> String {
    if body.iter().all(u8::is_ascii_whitespace) {
        return "empty body".into();
    }
    let cut = &body[..body.len().min(200)];
    String::from_utf8_lossy(cut).into_owned()
}

/// Next word count: a line through the last two probes, or a ratio after the first.
fn next_guess(probes: &[(u32, u32)], target: u32) -> u32 {
    let target = f64::from(target);
    let guess = match probes {
        [.., (w0, t0), (w1, t1)] if w0 != w1 && t0 != t1 => {
            let slope = (f64::from(*t1) - f64::from(*t0)) / (f64::from(*w1) - f64::from(*w0));
            let intercept = f64::from(*t1) - slope * f64::from(*w1);
            if slope > 0.0 {
                (target - intercept) / slope
            } else {
                f64::from(*w1) * target / f64::from((*t1).max(1))
            }
        }
        [.., (w, t)] => f64::from(*w) * target / f64::from((*t).max(1)),
        [] => target,
    };
    guess.round().clamp(1.0, target * 10.0 + 10.0) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_counts_from_each_servers_answer() {
        assert_eq!(token_count(br#"{"tokens":[1,2,3]}"#), Some(3));
        assert_eq!(
            token_count(br#"{"count":4,"tokens":[1,2,3,4],"max_model_len":2048}"#),
            Some(4)
        );
        assert_eq!(token_count(br#"{"detail":"Not Found"}"#), None);
        assert_eq!(token_count(b"<html>"), None);
    }

    #[test]
    fn error_bodies_are_named_when_empty() {
        assert_eq!(body_text(b""), "empty body");
        assert_eq!(body_text(b"  \n"), "empty body");
        assert_eq!(body_text(b"bad"), "bad");
    }

    #[test]
    fn guesses_converge_on_a_linear_tokenizer() {
        // A tokenizer counting 1.3 tokens per word plus a 17-token template.
        let count = |w: u32| (f64::from(w) * 1.3 + 17.0).round() as u32;
        let mut probes = vec![(4096, count(4096))];
        let w = next_guess(&probes, 4096);
        probes.push((w, count(w)));
        let w = next_guess(&probes, 4096);
        assert!(count(w).abs_diff(4096) <= 2, "{w} -> {}", count(w));
    }

    #[test]
    fn guess_never_zero() {
        // 10 words for 5000 tokens asks for 0.002 words: rounded up to the smallest prompt.
        assert_eq!(next_guess(&[(10, 5000)], 1), 1);
    }
}
