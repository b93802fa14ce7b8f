//! Serialization of SSE events and whole responses. The JSON envelope of a response (id,
//! object, created, model) is serialized once per request; each event only appends its delta,
//! so the per-chunk cost is a few memcpys into one buffer.

use std::io::Write;

use bytes::{BufMut, Bytes, BytesMut};
use rand::Rng;
use serde_json::json;

use crate::request::Api;

/// Generated tokens are drawn from these words (JSON-safe, no escaping needed). Each token is
/// emitted as a space followed by a word, so the output obeys the prompt token rule too.
const VOCABULARY: [&str; 32] = [
    "the",
    "engine",
    "streams",
    "tokens",
    "while",
    "a",
    "batch",
    "of",
    "sequences",
    "decodes",
    "in",
    "steps",
    "and",
    "each",
    "request",
    "waits",
    "for",
    "its",
    "slot",
    "before",
    "prefill",
    "ends",
    "with",
    "usage",
    "counted",
    "by",
    "server",
    "clock",
    "trace",
    "records",
    "every",
    "chunk",
];

/// The tokens of one decode step: their text and their vocabulary indices.
#[derive(Default)]
pub(crate) struct StepText {
    pub text: Vec<u8>,
    pub tokens: Vec<u8>,
}

impl StepText {
    /// Replaces the contents with `n` generated tokens.
    pub(crate) fn generate(&mut self, rng: &mut impl Rng, n: u32) {
        self.text.clear();
        self.tokens.clear();
        for _ in 0..n {
            let index = rng.gen_range(0..VOCABULARY.len());
            self.tokens.push(index as u8);
            self.text.push(b' ');
            self.text.extend_from_slice(VOCABULARY[index].as_bytes());
        }
    }
}

/// Log probability reported for a vocabulary word (a fixed, made-up value per word).
fn logprob_of(index: u8) -> f64 {
    -f64::from(index + 1) / 8.0
}

/// Token logprobs of one event: the step's tokens and, for completions, the byte offset of
/// its text in the whole output.
pub(crate) struct EventLogprobs<'a> {
    pub tokens: &'a [u8],
    pub text_offset: usize,
}

/// Token counts reported in usage objects.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct UsageCounts {
    pub prompt: u32,
    pub completion: u32,
    pub reasoning: u32,
    pub cached: u32,
}

/// Which field of a chat delta carries text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Channel {
    Reasoning,
    Content,
}

/// Builds every SSE event of one response.
pub(crate) struct ChunkTemplate {
    /// `data: {"id":…,"object":…,"created":…,"model":…,"choices":[`
    head: Vec<u8>,
    api: Api,
    reasoning_key: &'static str,
}

impl ChunkTemplate {
    /// Serializes the envelope once.
    pub(crate) fn new(
        api: Api,
        id: &str,
        created: u64,
        model: &str,
        reasoning_key: &'static str,
    ) -> Self {
        let object = match api {
            Api::Chat => "chat.completion.chunk",
            Api::Completions => "text_completion",
        };
        let model = Value::from(model).to_string();
        let id = Value::from(id).to_string();
        let head = format!(
            r#"data: {{"id":{id},"object":"{object}","created":{created},"model":{model},"choices":["#
        )
        .into_bytes();
        ChunkTemplate {
            head,
            api,
            reasoning_key,
        }
    }

    fn start(&self, extra: usize) -> BytesMut {
        let mut buf = BytesMut::with_capacity(self.head.len() + extra + 160);
        buf.put_slice(&self.head);
        buf
    }

    fn finish(buf: &mut BytesMut, usage: Option<UsageCounts>) -> Bytes {
        buf.put_slice(b"]");
        if let Some(usage) = usage {
            buf.put_slice(b",\"usage\":");
            let mut writer = std::mem::take(buf).writer();
            // Writing into memory cannot fail.
            let _ = write_usage(&mut writer, usage);
            *buf = writer.into_inner();
        }
        buf.put_slice(b"}\n\n");
        std::mem::take(buf).freeze()
    }

    /// The first chat event: `{"role":"assistant","content":""}`.
    pub(crate) fn role(&self, usage: Option<UsageCounts>) -> Bytes {
        let mut buf = self.start(0);
        buf.put_slice(
            br#"{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}"#,
        );
        Self::finish(&mut buf, usage)
    }

    /// A token event. `text` must be JSON-safe (generated text is) unless a fault wants
    /// otherwise.
    pub(crate) fn delta(
        &self,
        channel: Channel,
        text: &[u8],
        finish_reason: Option<&str>,
        usage: Option<UsageCounts>,
        logprobs: Option<EventLogprobs<'_>>,
    ) -> Bytes {
        let mut buf = self.start(text.len());
        match self.api {
            Api::Chat => {
                buf.put_slice(br#"{"index":0,"delta":{""#);
                buf.put_slice(match channel {
                    Channel::Reasoning => self.reasoning_key.as_bytes(),
                    Channel::Content => b"content",
                });
                buf.put_slice(b"\":\"");
                buf.put_slice(text);
                buf.put_slice(br#""},"logprobs":"#);
            }
            Api::Completions => {
                buf.put_slice(br#"{"index":0,"text":""#);
                buf.put_slice(text);
                buf.put_slice(br#"","logprobs":"#);
            }
        }
        match logprobs {
            Some(logprobs) => self.put_logprobs(&mut buf, logprobs),
            None => buf.put_slice(b"null"),
        }
        buf.put_slice(br#","finish_reason":"#);
        match finish_reason {
            Some(reason) => {
                buf.put_u8(b'"');
                buf.put_slice(reason.as_bytes());
                buf.put_u8(b'"');
            }
            None => buf.put_slice(b"null"),
        }
        buf.put_u8(b'}');
        Self::finish(&mut buf, usage)
    }

    /// Chat: `{"content":[{"token","logprob","bytes","top_logprobs"}…]}`; completions:
    /// `{"text_offset":[…],"token_logprobs":[…],"tokens":[…],"top_logprobs":null}`.
    fn put_logprobs(&self, buf: &mut BytesMut, logprobs: EventLogprobs<'_>) {
        let mut out = Vec::with_capacity(64 * logprobs.tokens.len());
        // Writing into memory cannot fail.
        let _ = match self.api {
            Api::Chat => write_chat_logprobs(&mut out, logprobs.tokens),
            Api::Completions => write_completion_logprobs(&mut out, &logprobs),
        };
        buf.put_slice(&out);
    }

    /// The final usage event: no choices, full usage.
    pub(crate) fn usage(&self, usage: UsageCounts) -> Bytes {
        let mut buf = self.start(0);
        Self::finish(&mut buf, Some(usage))
    }

    /// An event whose JSON is cut off (a fault).
    pub(crate) fn malformed(&self) -> Bytes {
        let mut buf = self.start(0);
        buf.put_slice(br#"{"index":0,"delta":{"content":" broken"#);
        buf.put_slice(b"\n\n");
        buf.freeze()
    }
}

fn write_chat_logprobs(out: &mut Vec<u8>, tokens: &[u8]) -> std::io::Result<()> {
    out.extend_from_slice(br#"{"content":["#);
    for (i, &index) in tokens.iter().enumerate() {
        let word = VOCABULARY[usize::from(index)];
        if i > 0 {
            out.push(b',');
        }
        write!(
            out,
            r#"{{"token":" {word}","logprob":{},"bytes":[32"#,
            logprob_of(index)
        )?;
        for b in word.bytes() {
            write!(out, ",{b}")?;
        }
        out.extend_from_slice(br#"],"top_logprobs":[]}"#);
    }
    out.extend_from_slice(b"]}");
    Ok(())
}

fn write_completion_logprobs(out: &mut Vec<u8>, lp: &EventLogprobs<'_>) -> std::io::Result<()> {
    out.extend_from_slice(br#"{"text_offset":["#);
    let mut offset = lp.text_offset;
    for (i, &index) in lp.tokens.iter().enumerate() {
        write!(out, "{}{offset}", if i > 0 { "," } else { "" })?;
        offset += 1 + VOCABULARY[usize::from(index)].len();
    }
    out.extend_from_slice(br#"],"token_logprobs":["#);
    for (i, &index) in lp.tokens.iter().enumerate() {
        write!(out, "{}{}", if i > 0 { "," } else { "" }, logprob_of(index))?;
    }
    out.extend_from_slice(br#"],"tokens":["#);
    for (i, &index) in lp.tokens.iter().enumerate() {
        let word = VOCABULARY[usize::from(index)];
        write!(out, r#"{}" {word}""#, if i > 0 { "," } else { "" })?;
    }
    out.extend_from_slice(br#"],"top_logprobs":null}"#);
    Ok(())
}

/// `data: [DONE]`.
pub(crate) fn done_event() -> Bytes {
    Bytes::from_static(b"data: [DONE]\n\n")
}

use serde_json::Value;

fn write_usage(out: &mut impl Write, u: UsageCounts) -> std::io::Result<()> {
    write!(
        out,
        r#"{{"prompt_tokens":{},"total_tokens":{},"completion_tokens":{},"prompt_tokens_details":{{"cached_tokens":{}}},"completion_tokens_details":{{"reasoning_tokens":{}}}}}"#,
        u.prompt,
        u64::from(u.prompt) + u64::from(u.completion),
        u.completion,
        u.cached,
        u.reasoning
    )
}

fn usage_value(u: UsageCounts) -> Value {
    json!({
        "prompt_tokens": u.prompt,
        "total_tokens": u64::from(u.prompt) + u64::from(u.completion),
        "completion_tokens": u.completion,
        "prompt_tokens_details": {"cached_tokens": u.cached},
        "completion_tokens_details": {"reasoning_tokens": u.reasoning},
    })
}

/// Everything a non-streaming response body needs.
pub(crate) struct WholeResponse<'a> {
    pub api: Api,
    pub id: &'a str,
    pub created: u64,
    pub model: &'a str,
    pub reasoning_key: &'static str,
    pub reasoning: &'a str,
    pub content: &'a str,
    pub finish_reason: &'a str,
    pub usage: UsageCounts,
}

impl WholeResponse<'_> {
    /// The JSON body of a non-streaming response.
    pub(crate) fn to_bytes(&self) -> Bytes {
        let choice = match self.api {
            Api::Chat => {
                let mut message = json!({"role": "assistant", "content": self.content});
                if !self.reasoning.is_empty() {
                    message[self.reasoning_key] = Value::from(self.reasoning);
                }
                json!({"index": 0, "message": message, "logprobs": null,
                       "finish_reason": self.finish_reason})
            }
            Api::Completions => json!({"index": 0, "text": self.content, "logprobs": null,
                                       "finish_reason": self.finish_reason}),
        };
        let object = match self.api {
            Api::Chat => "chat.completion",
            Api::Completions => "text_completion",
        };
        let body = json!({
            "id": self.id, "object": object, "created": self.created, "model": self.model,
            "choices": [choice], "usage": usage_value(self.usage),
        });
        Bytes::from(body.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(event: &Bytes) -> Value {
        let text = std::str::from_utf8(event).unwrap();
        let json = text
            .strip_prefix("data: ")
            .unwrap()
            .strip_suffix("\n\n")
            .unwrap();
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn chat_events_are_valid_json() {
        let t = ChunkTemplate::new(Api::Chat, "chatcmpl-1", 7, "m\"x", "reasoning_content");
        let role = parse(&t.role(None));
        assert_eq!(role["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(role["model"], "m\"x");
        let usage = UsageCounts {
            prompt: 3,
            completion: 2,
            reasoning: 1,
            cached: 0,
        };
        let d = parse(&t.delta(Channel::Reasoning, b" a b", Some("stop"), Some(usage), None));
        assert_eq!(d["choices"][0]["delta"]["reasoning_content"], " a b");
        assert_eq!(d["choices"][0]["finish_reason"], "stop");
        assert_eq!(d["usage"]["total_tokens"], 5);
        let u = parse(&t.usage(usage));
        assert_eq!(u["choices"].as_array().unwrap().len(), 0);
        assert_eq!(
            u["usage"]["completion_tokens_details"]["reasoning_tokens"],
            1
        );
        let text = String::from_utf8(t.malformed().to_vec()).unwrap();
        let json = text.strip_prefix("data: ").unwrap();
        assert!(serde_json::from_str::<Value>(json.trim_end()).is_err());
    }

    #[test]
    fn completion_events_and_whole_bodies() {
        let t = ChunkTemplate::new(Api::Completions, "cmpl-1", 7, "m", "reasoning");
        let d = parse(&t.delta(Channel::Content, b" x", None, None, None));
        assert_eq!(d["choices"][0]["text"], " x");
        let lp = EventLogprobs {
            tokens: &[0, 1],
            text_offset: 5,
        };
        let d = parse(&t.delta(Channel::Content, b" the engine", None, None, Some(lp)));
        let lp = &d["choices"][0]["logprobs"];
        assert_eq!(lp["tokens"], json!([" the", " engine"]));
        assert_eq!(lp["text_offset"], json!([5, 9]));
        assert_eq!(lp["token_logprobs"], json!([-0.125, -0.25]));
        let t = ChunkTemplate::new(Api::Chat, "c", 7, "m", "reasoning");
        let lp = EventLogprobs {
            tokens: &[0],
            text_offset: 0,
        };
        let d = parse(&t.delta(Channel::Content, b" the", None, None, Some(lp)));
        let content = &d["choices"][0]["logprobs"]["content"];
        assert_eq!(
            content,
            &json!([{"token": " the", "logprob": -0.125,
            "bytes": [32, 116, 104, 101], "top_logprobs": []}])
        );
        assert!(d["choices"][0]["finish_reason"].is_null());
        let whole = WholeResponse {
            api: Api::Chat,
            id: "c",
            created: 1,
            model: "m",
            reasoning_key: "reasoning",
            reasoning: " r",
            content: " c",
            finish_reason: "length",
            usage: UsageCounts::default(),
        };
        let v: Value = serde_json::from_slice(&whole.to_bytes()).unwrap();
        assert_eq!(v["choices"][0]["message"]["reasoning"], " r");
        assert_eq!(v["object"], "chat.completion");
    }
}
