//! Parsing an OpenAI request body into what the engine needs, and the prompt token rule.
//!
//! # Prompt token rule
//!
//! One token per whitespace-separated word (`str::split_whitespace`), so tests can predict it:
//! - `/v1/completions`: `prompt` as a string counts its words; an array of strings counts the
//!   words of all of them; an array of integers (token ids) counts its length; an array of such
//!   arrays counts all their lengths.
//! - `/v1/chat/completions`: the words of every message's `content` (a string, or the `text` of
//!   each part in an array of parts), plus `chat_tokens_per_message` (default 0) per message.
//!
//! Output text follows the same rule: every generated token is one word with a leading space.

use serde_json::Value;

/// Which OpenAI API a request came through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// `/v1/chat/completions`.
    Chat,
    /// `/v1/completions`.
    Completions,
}

/// A request rejected before it reaches the engine (answered with HTTP 400).
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The body is not JSON.
    #[error("request body is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A required field is missing or has the wrong type.
    #[error("invalid request: {0}")]
    Invalid(&'static str),
}

/// What the engine needs from a request body.
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedRequest {
    /// API the request came through.
    pub api: Api,
    /// Model named by the request (echoed back), if any.
    pub model: Option<String>,
    /// The prompt as words, joined by single spaces (prefix cache key material).
    pub prompt_words: Vec<String>,
    /// Prompt tokens under the documented rule.
    pub prompt_tokens: u32,
    /// `max_tokens` or `max_completion_tokens`.
    pub max_tokens: Option<u32>,
    /// `stream`.
    pub stream: bool,
    /// `stream_options.include_usage`.
    pub include_usage: bool,
    /// `stream_options.continuous_usage_stats` (vLLM): usage in every chunk.
    pub continuous_usage: bool,
    /// `ignore_eos`: generate exactly `max_tokens`.
    pub ignore_eos: bool,
    /// False when `chat_template_kwargs.enable_thinking` is false: no reasoning phase.
    pub thinking: bool,
    /// Token logprobs asked for (chat: `"logprobs": true`; completions: `"logprobs": N`).
    pub logprobs: bool,
}

/// Tokens in a text under the documented rule: whitespace-separated words.
pub fn count_tokens(text: &str) -> u32 {
    saturate(text.split_whitespace().count())
}

fn saturate(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn push_words(text: &str, words: &mut Vec<String>) {
    words.extend(text.split_whitespace().map(str::to_owned));
}

/// Parses a request body of the given API.
pub fn parse_request(
    api: Api,
    body: &[u8],
    chat_tokens_per_message: u32,
) -> Result<ParsedRequest, RequestError> {
    let value: Value = serde_json::from_slice(body)?;
    let obj = value
        .as_object()
        .ok_or(RequestError::Invalid("body must be a JSON object"))?;
    let mut words = Vec::new();
    let prompt_tokens = match api {
        Api::Chat => {
            let messages = obj
                .get("messages")
                .and_then(Value::as_array)
                .ok_or(RequestError::Invalid("`messages` must be an array"))?;
            let overhead = saturate(messages.len()).saturating_mul(chat_tokens_per_message);
            for message in messages {
                match message.get("content") {
                    Some(Value::String(text)) => push_words(text, &mut words),
                    Some(Value::Array(parts)) => {
                        for text in parts.iter().filter_map(|p| p.get("text")?.as_str()) {
                            push_words(text, &mut words);
                        }
                    }
                    _ => {}
                }
            }
            saturate(words.len()).saturating_add(overhead)
        }
        Api::Completions => completion_prompt_tokens(obj.get("prompt"), &mut words)?,
    };
    let stream_options = obj.get("stream_options");
    let flag = |v: Option<&Value>| v.and_then(Value::as_bool).unwrap_or(false);
    let max_tokens = obj
        .get("max_completion_tokens")
        .or_else(|| obj.get("max_tokens"))
        .and_then(Value::as_u64)
        .map(|n| u32::try_from(n).unwrap_or(u32::MAX));
    let thinking = obj
        .get("chat_template_kwargs")
        .and_then(|k| k.get("enable_thinking"))
        .and_then(Value::as_bool)
        .unwrap_or(true);
    let logprobs = match obj.get("logprobs") {
        Some(Value::Bool(on)) => *on,
        Some(Value::Number(_)) => api == Api::Completions,
        _ => false,
    };
    Ok(ParsedRequest {
        api,
        logprobs,
        model: obj.get("model").and_then(Value::as_str).map(str::to_owned),
        prompt_words: words,
        prompt_tokens,
        max_tokens,
        stream: flag(obj.get("stream")),
        include_usage: flag(stream_options.and_then(|o| o.get("include_usage"))),
        continuous_usage: flag(stream_options.and_then(|o| o.get("continuous_usage_stats"))),
        ignore_eos: flag(obj.get("ignore_eos")),
        thinking,
    })
}

fn completion_prompt_tokens(
    prompt: Option<&Value>,
    words: &mut Vec<String>,
) -> Result<u32, RequestError> {
    match prompt {
        Some(Value::String(text)) => {
            push_words(text, words);
            Ok(saturate(words.len()))
        }
        Some(Value::Array(items)) => {
            let mut total: u32 = 0;
            for item in items {
                let n = match item {
                    Value::String(text) => {
                        push_words(text, words);
                        count_tokens(text)
                    }
                    Value::Number(id) => {
                        words.push(id.to_string());
                        1
                    }
                    Value::Array(ids) => {
                        words.extend(ids.iter().map(Value::to_string));
                        saturate(ids.len())
                    }
                    _ => return Err(RequestError::Invalid("unsupported `prompt` element")),
                };
                total = total.saturating_add(n);
            }
            Ok(total)
        }
        _ => Err(RequestError::Invalid(
            "`prompt` must be a string or an array",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_counts_words_of_every_message_plus_overhead() {
        let body = br#"{"model":"m","messages":[
            {"role":"system","content":"be  terse"},
            {"role":"user","content":[{"type":"text","text":"one two\nthree"},{"type":"image_url"}]}
        ],"max_tokens":7,"stream":true,"stream_options":{"include_usage":true}}"#;
        let parsed = parse_request(Api::Chat, body, 0).unwrap();
        assert_eq!(parsed.prompt_tokens, 5);
        assert_eq!(parsed.max_tokens, Some(7));
        assert!(parsed.stream && parsed.include_usage && !parsed.continuous_usage);
        assert_eq!(parse_request(Api::Chat, body, 3).unwrap().prompt_tokens, 11);
    }

    #[test]
    fn completions_prompt_forms() {
        let tokens = |prompt: &str| {
            let body = format!(r#"{{"prompt":{prompt}}}"#);
            parse_request(Api::Completions, body.as_bytes(), 0)
                .unwrap()
                .prompt_tokens
        };
        assert_eq!(tokens(r#""a b c""#), 3);
        assert_eq!(tokens(r#"["a b", "c"]"#), 3);
        assert_eq!(tokens("[1, 2, 3, 4]"), 4);
        assert_eq!(tokens("[[1, 2], [3]]"), 3);
        assert_eq!(tokens(r#""""#), 0);
    }

    #[test]
    fn rejects_bad_bodies() {
        assert!(parse_request(Api::Chat, b"{", 0).is_err());
        assert!(parse_request(Api::Chat, b"{}", 0).is_err());
        assert!(parse_request(Api::Completions, br#"{"prompt":{}}"#, 0).is_err());
    }

    #[test]
    fn options_and_thinking_switch() {
        let body = br#"{"prompt":"x","max_completion_tokens":3,"ignore_eos":true,
            "stream_options":{"continuous_usage_stats":true},
            "chat_template_kwargs":{"enable_thinking":false}}"#;
        let parsed = parse_request(Api::Completions, body, 0).unwrap();
        assert_eq!(parsed.max_tokens, Some(3));
        assert!(parsed.ignore_eos && parsed.continuous_usage && !parsed.thinking);
    }
}
