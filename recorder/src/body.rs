//! Request bodies for the chat and completions APIs.

use crate::config::{Api, RecordConfig};
use crate::prompts::Prompt;
use serde_json::{json, Map, Value};

/// Serialize the streaming request body for `prompt`; `max_tokens` overrides the config's
/// (calibration probes ask for one token).
pub fn build(config: &RecordConfig, prompt: &Prompt, max_tokens: Option<u32>) -> Vec<u8> {
    let mut body = Map::new();
    body.insert("model".into(), Value::String(config.model.clone()));
    match (config.api, prompt) {
        (Api::Chat, Prompt::Text(text)) => {
            body.insert(
                "messages".into(),
                json!([{ "role": "user", "content": text }]),
            );
        }
        (Api::Chat, Prompt::Messages(messages)) => {
            body.insert("messages".into(), messages.as_ref().clone());
        }
        (Api::Completions, Prompt::Text(text)) => {
            body.insert("prompt".into(), Value::String(text.clone()));
        }
        // Prompt files with messages are refused for completions when loaded; send the
        // messages' JSON as text rather than fail mid-run.
        (Api::Completions, Prompt::Messages(messages)) => {
            body.insert("prompt".into(), Value::String(messages.to_string()));
        }
    }
    body.insert("stream".into(), Value::Bool(true));
    if let Some(max) = max_tokens.or(config.max_tokens) {
        body.insert("max_tokens".into(), json!(max));
    }
    if config.ignore_eos {
        body.insert("ignore_eos".into(), Value::Bool(true));
    }
    if config.include_usage || config.continuous_usage {
        let mut options = Map::new();
        options.insert("include_usage".into(), Value::Bool(config.include_usage));
        if config.continuous_usage {
            options.insert("continuous_usage_stats".into(), Value::Bool(true));
        }
        body.insert("stream_options".into(), Value::Object(options));
    }
    if let Some(extra) = &config.extra_body {
        for (key, value) in extra {
            body.insert(key.clone(), value.clone());
        }
    }
    serde_json::to_vec(&Value::Object(body)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> Value {
        serde_json::from_slice(bytes).unwrap()
    }

    #[test]
    fn chat_body_asks_for_usage_and_merges_extra() {
        let mut config = RecordConfig::new("http://x/v1", "m", "t".into());
        config.ignore_eos = true;
        let extra = json!({"temperature": 0, "max_tokens": 9, "chat_template_kwargs": {"enable_thinking": true}});
        config.extra_body = extra.as_object().cloned();
        let body = parse(&build(&config, &Prompt::Text("hi".into()), None));
        assert_eq!(body["messages"][0]["content"], "hi");
        assert_eq!(body["stream"], true);
        assert_eq!(body["ignore_eos"], true);
        assert_eq!(body["max_tokens"], 9);
        assert_eq!(body["stream_options"]["include_usage"], true);
        assert_eq!(body["stream_options"]["continuous_usage_stats"], true);
        assert_eq!(body["chat_template_kwargs"]["enable_thinking"], true);
    }

    #[test]
    fn completions_body_without_continuous_usage() {
        let mut config = RecordConfig::new("http://x/v1", "m", "t".into());
        config.api = Api::Completions;
        config.continuous_usage = false;
        let body = parse(&build(&config, &Prompt::Text("p".into()), Some(1)));
        assert_eq!(body["prompt"], "p");
        assert_eq!(body["max_tokens"], 1);
        assert!(body["stream_options"]
            .get("continuous_usage_stats")
            .is_none());
    }
}
