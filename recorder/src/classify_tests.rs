use super::*;

fn run(json: &str) -> Classified {
    let mut sink = OutputSink::new(false);
    classify(json.as_bytes(), &mut sink).unwrap()
}

#[test]
fn chat_role_chunk() {
    let c = run(r#"{"id":"x","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#);
    assert_eq!(c.channel, Channel::Role);
    assert_eq!(c.text_len, 0);
}

#[test]
fn chat_content_with_escapes_counts_unescaped_bytes() {
    let c = run(r#"{"choices":[{"delta":{"content":"a\nb\u00e9"},"finish_reason":null}]}"#);
    assert_eq!(c.channel, Channel::Content);
    assert_eq!(c.text_len, 5);
    assert!(c.finish_reason.is_none());
}

#[test]
fn reasoning_under_both_field_names() {
    let a = run(r#"{"choices":[{"delta":{"reasoning_content":"think"}}]}"#);
    let b = run(r#"{"choices":[{"delta":{"reasoning":"hmm","content":null}}]}"#);
    assert_eq!((a.channel, a.text_len), (Channel::Reasoning, 5));
    assert_eq!((b.channel, b.text_len), (Channel::Reasoning, 3));
}

#[test]
fn completions_text_and_finish() {
    let c = run(r#"{"object":"text_completion","choices":[{"text":"hi","finish_reason":null}]}"#);
    assert_eq!((c.channel, c.text_len), (Channel::Content, 2));
    let f = run(r#"{"choices":[{"text":"","finish_reason":"length"}]}"#);
    assert_eq!(f.channel, Channel::Finish);
    assert_eq!(f.finish_reason.unwrap().as_str(), "length");
}

#[test]
fn usage_only_event() {
    let c = run(
        r#"{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":7,"total_tokens":17,
        "prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":3}}}"#,
    );
    assert_eq!(c.channel, Channel::Usage);
    let u = c.usage.unwrap();
    assert_eq!(u.prompt_tokens, Some(10));
    assert_eq!(u.completion_tokens, Some(7));
    assert_eq!(u.cached_tokens, Some(4));
    assert_eq!(u.reasoning_tokens, Some(3));
}

#[test]
fn content_with_continuous_usage_stays_content() {
    let c = run(
        r#"{"choices":[{"delta":{"content":"abc"}}],"usage":{"prompt_tokens":5,"completion_tokens":2,"prompt_tokens_details":null}}"#,
    );
    assert_eq!(c.channel, Channel::Content);
    assert_eq!(c.usage.unwrap().completion_tokens, Some(2));
}

#[test]
fn tool_call_arguments() {
    let c = run(
        r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":"}}]}}]}"#,
    );
    assert_eq!((c.channel, c.text_len), (Channel::Tool, 5));
}

#[test]
fn error_object() {
    let c = run(r#"{"error":{"message":"boom","code":500}}"#);
    assert_eq!(c.channel, Channel::Error);
}

#[test]
fn logprobs_count_tokens() {
    let c = run(
        r#"{"choices":[{"delta":{"content":"ab"},"logprobs":{"content":[{"token":"a","logprob":-1},{"token":"b","logprob":-2}]}}]}"#,
    );
    assert_eq!(c.logprob_tokens, Some(2));
}

#[test]
fn empty_delta_is_other() {
    assert_eq!(run(r#"{"choices":[{"delta":{}}]}"#).channel, Channel::Other);
}

#[test]
fn malformed_json_is_an_error() {
    let mut sink = OutputSink::new(false);
    assert!(classify(b"{\"choices\":[", &mut sink).is_err());
    assert!(classify(b"not json", &mut sink).is_err());
    assert!(classify(b"{\"choices\":[{\"delta\":{\"content\":5}}]}", &mut sink).is_err());
}

#[test]
fn output_hash_covers_concatenated_text_and_capture() {
    let mut sink = OutputSink::new(true);
    classify(br#"{"choices":[{"delta":{"reasoning":"ab"}}]}"#, &mut sink).unwrap();
    assert_eq!(sink.captured, "ab");
    sink.captured.clear();
    classify(br#"{"choices":[{"delta":{"content":"cd"}}]}"#, &mut sink).unwrap();
    assert_eq!(sink.captured, "cd");
    assert_eq!(sink.output_bytes, 4);
    assert_eq!(sink.output_hash(), xxhash_rust::xxh3::xxh3_64(b"abcd"));
}
