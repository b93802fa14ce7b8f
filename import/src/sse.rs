//! Classifies one OpenAI-style SSE data payload the way the recorder does: which channel it
//! belongs to, its text, usage and finish reason.
//!
//! The precedence (error, content, reasoning, tool, role, finish, usage, other) matches the
//! recorder's classifier so imported and recorded traces mean the same by each channel.

use serde_json::Value;
use tokentrace_format::{Channel, Usage};

/// What one event carried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Event {
    /// The channel the event is recorded under.
    pub channel: Channel,
    /// Reasoning text in the event.
    pub reasoning: String,
    /// Visible content text in the event (chat `delta.content` or completions `text`).
    pub content: String,
    /// Bytes of tool-call text (function names and arguments).
    pub tool_bytes: usize,
    /// `usage` when the event had one.
    pub usage: Option<Usage>,
    /// A non-null `finish_reason`.
    pub finish_reason: Option<String>,
    /// The error message of an in-stream error object.
    pub error: Option<String>,
}

impl Event {
    /// An event of `channel` with no text, usage or finish reason.
    pub fn new(channel: Channel) -> Event {
        Event {
            channel,
            reasoning: String::new(),
            content: String::new(),
            tool_bytes: 0,
            usage: None,
            finish_reason: None,
            error: None,
        }
    }

    /// UTF-8 bytes of reasoning, content and tool text.
    pub fn text_len(&self) -> usize {
        self.reasoning.len() + self.content.len() + self.tool_bytes
    }
}

/// Classifies a payload; `Err` carries the JSON error when it is neither `[DONE]` nor JSON.
pub(crate) fn classify(payload: &str) -> Result<Event, serde_json::Error> {
    if payload.trim() == "[DONE]" {
        return Ok(Event::new(Channel::Done));
    }
    let value: Value = serde_json::from_str(payload)?;
    Ok(classify_value(&value))
}

fn classify_value(value: &Value) -> Event {
    let mut event = Event::new(Channel::Other);
    event.usage = value.get("usage").and_then(parse_usage);
    if let Some(err) = value.get("error").filter(|e| !e.is_null()) {
        event.channel = Channel::Error;
        event.error = Some(error_text(err));
        return event;
    }
    let choice = value
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first());
    let mut role = false;
    let mut tool = false;
    if let Some(choice) = choice {
        event.finish_reason = choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .map(str::to_string);
        if let Some(text) = choice.get("text").and_then(Value::as_str) {
            event.content.push_str(text);
        }
        // A non-streamed completion carries the whole answer as `message`.
        if let Some(delta) = choice.get("delta").or_else(|| choice.get("message")) {
            role = delta.get("role").is_some_and(|r| !r.is_null());
            if let Some(text) = delta.get("content").and_then(Value::as_str) {
                event.content.push_str(text);
            }
            let reasoning = delta
                .get("reasoning_content")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .or_else(|| delta.get("reasoning").and_then(Value::as_str));
            if let Some(text) = reasoning {
                event.reasoning.push_str(text);
            }
            if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
                tool = !calls.is_empty();
                event.tool_bytes = calls.iter().map(tool_call_bytes).sum();
            }
        }
    }
    event.channel = if !event.content.is_empty() {
        Channel::Content
    } else if !event.reasoning.is_empty() {
        Channel::Reasoning
    } else if tool {
        Channel::Tool
    } else if role {
        Channel::Role
    } else if event.finish_reason.is_some() {
        Channel::Finish
    } else if event.usage.is_some() {
        Channel::Usage
    } else {
        Channel::Other
    };
    event
}

/// Bytes of a tool-call delta's function name and arguments.
fn tool_call_bytes(call: &Value) -> usize {
    let function = call.get("function");
    let name = function
        .and_then(|f| f.get("name"))
        .and_then(Value::as_str)
        .map_or(0, str::len);
    let args = function
        .and_then(|f| f.get("arguments"))
        .and_then(Value::as_str)
        .map_or(0, str::len);
    name + args
}

/// Reads an OpenAI `usage` object; `None` when it has none of the counts.
pub(crate) fn parse_usage(value: &Value) -> Option<Usage> {
    let count = |v: Option<&Value>| v.and_then(Value::as_u64).map(crate::fields::sat_u32);
    let usage = Usage {
        prompt_tokens: count(value.get("prompt_tokens")),
        completion_tokens: count(value.get("completion_tokens")),
        reasoning_tokens: count(
            value
                .get("completion_tokens_details")
                .and_then(|d| d.get("reasoning_tokens")),
        ),
        cached_tokens: count(
            value
                .get("prompt_tokens_details")
                .and_then(|d| d.get("cached_tokens")),
        ),
    };
    (usage != Usage::default()).then_some(usage)
}

/// The message of an error object or string.
fn error_text(err: &Value) -> String {
    match err {
        Value::String(s) => s.clone(),
        _ => err
            .get("message")
            .and_then(Value::as_str)
            .map_or_else(|| err.to_string(), str::to_string),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_chunk_with_empty_content_is_role() {
        let e = classify(r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#)
            .unwrap();
        assert_eq!(e.channel, Channel::Role);
        assert_eq!(e.text_len(), 0);
    }

    #[test]
    fn content_with_finish_reason_is_content() {
        let e = classify(r#"{"choices":[{"delta":{"content":" time"},"finish_reason":"length"}]}"#)
            .unwrap();
        assert_eq!(e.channel, Channel::Content);
        assert_eq!(e.content, " time");
        assert_eq!(e.finish_reason.as_deref(), Some("length"));
    }

    #[test]
    fn usage_only_chunk() {
        let e = classify(
            r#"{"choices":[],"usage":{"prompt_tokens":117,"completion_tokens":64,"total_tokens":181,"completion_tokens_details":{"reasoning_tokens":0}}}"#,
        )
        .unwrap();
        assert_eq!(e.channel, Channel::Usage);
        let u = e.usage.unwrap();
        assert_eq!(
            (
                u.prompt_tokens,
                u.completion_tokens,
                u.reasoning_tokens,
                u.cached_tokens
            ),
            (Some(117), Some(64), Some(0), None)
        );
    }

    #[test]
    fn reasoning_tool_done_error_and_completions() {
        assert_eq!(
            classify(r#"{"choices":[{"delta":{"reasoning_content":"hm"}}]}"#)
                .unwrap()
                .channel,
            Channel::Reasoning
        );
        assert_eq!(
            classify(r#"{"choices":[{"delta":{"reasoning":"hm"}}]}"#)
                .unwrap()
                .channel,
            Channel::Reasoning
        );
        let tool = classify(r#"{"choices":[{"delta":{"tool_calls":[{"function":{"name":"f","arguments":"{}"}}]}}]}"#).unwrap();
        assert_eq!((tool.channel, tool.text_len()), (Channel::Tool, 3));
        assert_eq!(classify("[DONE]").unwrap().channel, Channel::Done);
        let err = classify(r#"{"error":{"message":"overloaded","code":503}}"#).unwrap();
        assert_eq!(
            (err.channel, err.error.as_deref()),
            (Channel::Error, Some("overloaded"))
        );
        assert_eq!(
            classify(r#"{"choices":[{"text":"ab"}]}"#).unwrap().channel,
            Channel::Content
        );
        assert!(classify("{not json").is_err());
    }
}
