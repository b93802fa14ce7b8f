//! What the server says about itself: a bounded, best-effort read of the engines' own
//! description endpoints, kept in the trace manifest (`extra["server_info"]`) and in a
//! capacity search's report.
//!
//! - `GET {base}/models` (OpenAI, vLLM, SGLang): `data[0].id`, `data[0].root`,
//!   `data[0].max_model_len`;
//! - `GET {origin}/get_server_info` (SGLang): `model_path`, `context_length`, `tp_size`,
//!   `max_total_num_tokens`, `speculative_algorithm`, `speculative_num_steps`,
//!   `speculative_eagle_topk`, `speculative_num_draft_tokens`, `version`;
//! - `GET {origin}/props` (llama.cpp): `default_generation_settings.n_ctx` (or `n_ctx`),
//!   `model_path`, `build_info`, `total_slots`.
//!
//! `{origin}` is the base URL without its path (`http://host:8000` for
//! `http://host:8000/v1`). The three reads run at once, each bounded to [`GET_TIMEOUT`] and
//! [`BODY_LIMIT`] bytes, with the run's API key and headers. Nothing here can fail a run: an
//! endpoint that is missing, slow, unauthorized or not JSON simply contributes nothing.

use crate::config::RecordConfig;
use crate::http::{build_client, fetch as fetch_raw, request_headers, HttpClient};
use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderMap, HeaderValue, ACCEPT};
use hyper::{Method, Request, Uri};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::Duration;
use tokentrace_format::Manifest;

/// The longest one description read may take, response body included.
pub const GET_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest description body read (a `/props` answer with a chat template is a few KiB).
pub const BODY_LIMIT: usize = 1 << 20;
/// The manifest `extra` key the description is stored under.
pub const MANIFEST_KEY: &str = "server_info";

/// What the server reported about itself; every field is absent when no endpoint said it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerInfo {
    /// The endpoints that answered with JSON (`models`, `get_server_info`, `props`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered: Option<Vec<String>>,
    /// The first model's id (`/models` `data[0].id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_id: Option<String>,
    /// Where the weights came from: SGLang's or llama.cpp's `model_path`, else vLLM's
    /// `data[0].root`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_path: Option<String>,
    /// The longest context a request may use: SGLang `context_length`, llama.cpp `n_ctx`
    /// (per slot), vLLM `max_model_len`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_length: Option<u64>,
    /// Tensor-parallel degree (SGLang `tp_size`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor_parallelism: Option<u64>,
    /// Tokens of KV cache the server holds (SGLang `max_total_num_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub physical_token_pool: Option<u64>,
    /// Speculative decoding algorithm (SGLang `speculative_algorithm`; absent when off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative_algorithm: Option<String>,
    /// Speculative steps (SGLang `speculative_num_steps`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative_steps: Option<u64>,
    /// Draft top-k (SGLang `speculative_eagle_topk`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative_topk: Option<u64>,
    /// Draft tokens per step (SGLang `speculative_num_draft_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative_draft_tokens: Option<u64>,
    /// Parallel request slots (llama.cpp `total_slots`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_slots: Option<u64>,
    /// The engine's own version string (SGLang `version`, llama.cpp `build_info`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_version: Option<String>,
}

impl ServerInfo {
    /// Whether no endpoint said anything.
    pub fn is_empty(&self) -> bool {
        *self == ServerInfo::default()
    }

    /// The description as JSON (only the fields that are known).
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// Reads the description back from a manifest (None when it has none or it is unreadable).
    pub fn from_manifest(manifest: &Manifest) -> Option<ServerInfo> {
        serde_json::from_value(manifest.extra.get(MANIFEST_KEY)?.clone()).ok()
    }

    /// Stores the description in `manifest.extra["server_info"]` (nothing when absent).
    pub fn store(info: Option<&ServerInfo>, manifest: &mut Manifest) {
        if let Some(info) = info.filter(|i| !i.is_empty()) {
            manifest.extra.insert(MANIFEST_KEY.into(), info.to_json());
        }
    }

    /// Folds SGLang's `/get_server_info` answer in (first source wins per field). A
    /// prefill/decode split server nests the decode server's description under `decode[0]`.
    fn add_sglang(&mut self, v: &Value) {
        let v = v.pointer("/decode/0").unwrap_or(v);
        fill_str(&mut self.model_path, v.get("model_path"));
        fill_u64(&mut self.context_length, v.get("context_length"));
        fill_u64(&mut self.tensor_parallelism, v.get("tp_size"));
        fill_u64(&mut self.physical_token_pool, v.get("max_total_num_tokens"));
        fill_str(
            &mut self.speculative_algorithm,
            v.get("speculative_algorithm"),
        );
        fill_u64(&mut self.speculative_steps, v.get("speculative_num_steps"));
        fill_u64(&mut self.speculative_topk, v.get("speculative_eagle_topk"));
        fill_u64(
            &mut self.speculative_draft_tokens,
            v.get("speculative_num_draft_tokens"),
        );
        fill_str(&mut self.engine_version, v.get("version"));
    }

    /// Folds llama.cpp's `/props` answer in.
    fn add_llama_cpp(&mut self, v: &Value) {
        let n_ctx = v
            .pointer("/default_generation_settings/n_ctx")
            .or_else(|| v.get("n_ctx"));
        fill_u64(&mut self.context_length, n_ctx);
        fill_str(&mut self.model_path, v.get("model_path"));
        fill_str(&mut self.engine_version, v.get("build_info"));
        fill_u64(&mut self.total_slots, v.get("total_slots"));
    }

    /// Folds the `/models` answer in.
    fn add_models(&mut self, v: &Value) {
        let Some(first) = v.pointer("/data/0") else {
            return;
        };
        fill_str(&mut self.model_id, first.get("id"));
        fill_u64(&mut self.context_length, first.get("max_model_len"));
        fill_str(&mut self.model_path, first.get("root"));
    }

    fn answered(&mut self, endpoint: &str) {
        self.answered
            .get_or_insert_with(Vec::new)
            .push(endpoint.to_string());
    }
}

fn fill_str(slot: &mut Option<String>, v: Option<&Value>) {
    if slot.is_none() {
        *slot = v
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty() && !s.eq_ignore_ascii_case("none"))
            .map(str::to_string);
    }
}

fn fill_u64(slot: &mut Option<u64>, v: Option<&Value>) {
    if slot.is_none() {
        *slot = v.and_then(Value::as_u64);
    }
}

/// `scheme://authority` of a base URL (`http://host:8000/v1` gives `http://host:8000`).
fn origin_of(base: &str) -> Option<String> {
    let uri: Uri = base.parse().ok()?;
    Some(format!("{}://{}", uri.scheme_str()?, uri.authority()?))
}

/// The headers of a description read: the run's own (API key and `--header`s), with
/// `Accept: application/json` instead of the stream's `text/event-stream` and no body type.
fn read_headers(run_headers: &HeaderMap) -> HeaderMap {
    let mut headers = run_headers.clone();
    headers.remove(hyper::header::CONTENT_TYPE);
    headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
    headers
}

/// One `GET` bounded by `limit`: the body as JSON, or None for any failure, non-2xx status
/// or timeout.
async fn get_json(
    client: &HttpClient,
    url: &str,
    headers: &HeaderMap,
    limit: Duration,
) -> Option<Value> {
    let uri: Uri = url.parse().ok()?;
    let mut request = Request::new(Full::<Bytes>::default());
    *request.method_mut() = Method::GET;
    *request.uri_mut() = uri;
    *request.headers_mut() = headers.clone();
    let (status, body) = fetch_raw(client, request, limit, BODY_LIMIT).await.ok()?;
    if !(200..300).contains(&status) {
        return None;
    }
    serde_json::from_slice::<Value>(&body).ok()
}

/// Reads the three description endpoints of the server behind `base_url` (`…/v1`) at once,
/// with `run_headers` (the run's authorization and extra headers). None when none answered.
pub async fn fetch(
    client: &HttpClient,
    base_url: &str,
    run_headers: &HeaderMap,
) -> Option<ServerInfo> {
    let base = base_url.trim_end_matches('/');
    let headers = read_headers(run_headers);
    let origin = origin_of(base)?;
    let models_url = format!("{base}/models");
    let sglang_url = format!("{origin}/get_server_info");
    let props_url = format!("{origin}/props");
    let (models, sglang, props) = tokio::join!(
        get_json(client, &models_url, &headers, GET_TIMEOUT),
        get_json(client, &sglang_url, &headers, GET_TIMEOUT),
        get_json(client, &props_url, &headers, GET_TIMEOUT),
    );
    let mut info = ServerInfo::default();
    // The engines' own descriptions first: they say more than the OpenAI model list.
    if let Some(v) = sglang.filter(Value::is_object) {
        info.answered("get_server_info");
        info.add_sglang(&v);
    }
    if let Some(v) = props.filter(Value::is_object) {
        info.answered("props");
        info.add_llama_cpp(&v);
    }
    if let Some(v) = models.filter(Value::is_object) {
        info.answered("models");
        info.add_models(&v);
    }
    (!info.is_empty()).then_some(info)
}

/// [`fetch`] for a config, on a runtime of its own (for callers outside any async context,
/// such as a capacity search before its first trial). None on any failure.
pub fn fetch_blocking(config: &RecordConfig) -> Option<ServerInfo> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    runtime.block_on(async {
        let client = build_client(config).ok()?;
        let headers = request_headers(config).ok()?;
        fetch(&client, &config.base_url, &headers).await
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::path::PathBuf;
    use std::sync::{Arc, Mutex};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A tiny HTTP/1.1 server on 127.0.0.1 answering `routes` (path, status, body) and
    /// recording every request head it read. Unknown paths get 404; `/slow` never answers.
    async fn serve(routes: Vec<(&'static str, u16, String)>) -> (String, Arc<Mutex<Vec<String>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                let routes = routes.clone();
                let log = log.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    let mut head = Vec::new();
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match socket.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let text = String::from_utf8_lossy(&head).into_owned();
                    // Read the whole body before answering, so closing never resets it.
                    let body_len: usize = text
                        .lines()
                        .find_map(|l| {
                            let (name, value) = l.split_once(':')?;
                            name.eq_ignore_ascii_case("content-length")
                                .then(|| value.trim().parse().ok())?
                        })
                        .unwrap_or(0);
                    let head_end = text.find("\r\n\r\n").map_or(head.len(), |i| i + 4);
                    let mut have = head.len().saturating_sub(head_end);
                    while have < body_len {
                        match socket.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => have += n,
                        }
                    }
                    let path = text.split_whitespace().nth(1).unwrap_or("").to_string();
                    log.lock().unwrap().push(text);
                    if path == "/slow" {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                    }
                    let (status, body) = routes
                        .iter()
                        .find(|(p, _, _)| *p == path)
                        .map(|(_, s, b)| (*s, b.clone()))
                        .unwrap_or((404, "{\"error\":\"no such route\"}".into()));
                    let kind = if body.starts_with("data:") {
                        "text/event-stream"
                    } else {
                        "application/json"
                    };
                    let reply = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = socket.write_all(reply.as_bytes()).await;
                });
            }
        });
        (format!("http://{addr}/v1"), seen)
    }

    fn config(base: &str) -> RecordConfig {
        let mut c = RecordConfig::new(base, "m", PathBuf::from("unused.tt"));
        c.api_key = Some("sk-test".into());
        c.headers = vec![("X-Tenant".into(), "blue".into())];
        c
    }

    async fn fetch_config(c: &RecordConfig) -> Option<ServerInfo> {
        let client = build_client(c).unwrap();
        fetch(&client, &c.base_url, &request_headers(c).unwrap()).await
    }

    #[tokio::test]
    async fn reads_sglang_server_info_with_the_runs_headers() {
        let sglang = json!({
            "model_path": "org/Model-27B-AWQ", "context_length": 262144, "tp_size": 4,
            "max_total_num_tokens": 262144, "speculative_algorithm": "EAGLE",
            "speculative_num_steps": 7, "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": 8, "version": "0.5.4"
        });
        let models = json!({"object": "list", "data": [{"id": "served", "root": "/models/x",
                            "max_model_len": 4096}]});
        let (base, seen) = serve(vec![
            ("/get_server_info", 200, sglang.to_string()),
            ("/v1/models", 200, models.to_string()),
        ])
        .await;
        let info = fetch_config(&config(&base)).await.unwrap();
        assert_eq!(info.model_path.as_deref(), Some("org/Model-27B-AWQ"));
        // The engine's own description wins over the model list.
        assert_eq!(info.context_length, Some(262144));
        assert_eq!(info.tensor_parallelism, Some(4));
        assert_eq!(info.physical_token_pool, Some(262144));
        assert_eq!(info.speculative_algorithm.as_deref(), Some("EAGLE"));
        assert_eq!(
            (
                info.speculative_steps,
                info.speculative_topk,
                info.speculative_draft_tokens
            ),
            (Some(7), Some(1), Some(8))
        );
        assert_eq!(info.engine_version.as_deref(), Some("0.5.4"));
        assert_eq!(info.model_id.as_deref(), Some("served"));
        assert_eq!(
            info.answered,
            Some(vec!["get_server_info".into(), "models".into()])
        );
        let heads = seen.lock().unwrap().clone();
        assert_eq!(heads.len(), 3, "{heads:?}");
        for head in &heads {
            let lower = head.to_ascii_lowercase();
            assert!(lower.contains("authorization: bearer sk-test"), "{head}");
            assert!(lower.contains("x-tenant: blue"), "{head}");
            assert!(lower.contains("accept: application/json"), "{head}");
        }
    }

    #[tokio::test]
    async fn reads_llama_cpp_props_and_vllm_models() {
        let props = json!({"default_generation_settings": {"n_ctx": 8192},
                           "model_path": "/m/q4.gguf", "build_info": "b5000-abc",
                           "total_slots": 4});
        let (base, _) = serve(vec![("/props", 200, props.to_string())]).await;
        let info = fetch_config(&config(&base)).await.unwrap();
        assert_eq!(
            (info.context_length, info.total_slots),
            (Some(8192), Some(4))
        );
        assert_eq!(info.model_path.as_deref(), Some("/m/q4.gguf"));
        assert_eq!(info.engine_version.as_deref(), Some("b5000-abc"));
        assert_eq!(info.physical_token_pool, None);

        let models = json!({"data": [{"id": "m", "root": "/w/m", "max_model_len": 32768}]});
        let (base, _) = serve(vec![("/v1/models", 200, models.to_string())]).await;
        let info = fetch_config(&config(&base)).await.unwrap();
        assert_eq!(
            (info.context_length, info.model_path.as_deref()),
            (Some(32768), Some("/w/m"))
        );
    }

    #[tokio::test]
    async fn nothing_useful_is_none_and_never_an_error() {
        // 404s, a 401 and a body that is not JSON.
        let (base, _) = serve(vec![
            ("/props", 401, "{\"error\":\"no key\"}".into()),
            ("/get_server_info", 200, "not json".into()),
        ])
        .await;
        assert_eq!(fetch_config(&config(&base)).await, None);
        // Nothing listening at all.
        let dead = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        assert_eq!(
            fetch_config(&config(&format!("http://{dead}/v1"))).await,
            None
        );
        assert_eq!(origin_of("not a url"), None);
    }

    #[tokio::test]
    async fn a_server_that_never_answers_costs_one_timeout() {
        let (base, _) = serve(vec![]).await;
        // This path is read but never answered.
        let slow = base.replace("/v1", "/slow");
        let client = build_client(&config(&base)).unwrap();
        let limit = Duration::from_millis(200);
        let started = std::time::Instant::now();
        assert_eq!(
            get_json(&client, &slow, &HeaderMap::new(), limit).await,
            None
        );
        let took = started.elapsed();
        assert!(took >= limit && took < Duration::from_secs(3), "{took:?}");
    }

    #[tokio::test]
    async fn a_recording_keeps_the_servers_description_in_its_manifest() {
        let chunk = |delta: &str, finish: &str| {
            format!(
                "data: {{\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}]}}\n\n"
            )
        };
        let stream = [
            chunk("{\"role\":\"assistant\"}", "null"),
            chunk("{\"content\":\"hello\"}", "null"),
            chunk("{}", "\"stop\""),
            "data: [DONE]\n\n".to_string(),
        ]
        .concat();
        let props = json!({"default_generation_settings": {"n_ctx": 4096}, "total_slots": 2});
        let (base, _) = serve(vec![
            ("/v1/chat/completions", 200, stream),
            ("/props", 200, props.to_string()),
        ])
        .await;
        let dir = tempfile::tempdir().unwrap();
        let prompts = dir.path().join("prompts.jsonl");
        std::fs::write(&prompts, "{\"prompt\": \"hi\"}\n").unwrap();
        let mut c = config(&base);
        c.output = dir.path().join("run.tt");
        c.prompts = crate::config::PromptSource::File(prompts);
        c.requests = Some(2);
        c.threads = 1;
        let summary = crate::run::run_async(c.clone()).await.unwrap();
        assert_eq!(summary.requests, 2);
        let reader = tokentrace_format::TraceReader::open(&c.output).unwrap();
        let info = ServerInfo::from_manifest(reader.manifest()).unwrap();
        assert_eq!(
            (info.context_length, info.total_slots),
            (Some(4096), Some(2))
        );
    }

    #[test]
    fn stored_in_the_manifest_and_read_back() {
        let mut manifest = Manifest::default();
        ServerInfo::store(None, &mut manifest);
        ServerInfo::store(Some(&ServerInfo::default()), &mut manifest);
        assert!(manifest.extra.is_empty());
        let info = ServerInfo {
            context_length: Some(4096),
            ..ServerInfo::default()
        };
        ServerInfo::store(Some(&info), &mut manifest);
        assert_eq!(
            manifest.extra[MANIFEST_KEY],
            json!({"context_length": 4096})
        );
        assert_eq!(ServerInfo::from_manifest(&manifest), Some(info));
    }

    #[test]
    fn sglang_split_servers_describe_the_decode_side() {
        let mut info = ServerInfo::default();
        info.add_sglang(&json!({"decode": [{"tp_size": 2, "speculative_algorithm": null}]}));
        assert_eq!(info.tensor_parallelism, Some(2));
        assert_eq!(info.speculative_algorithm, None);
    }
}
