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
fn reasoning_sent_under_both_names_counts_once() {
    let both = br#"{"choices":[{"delta":{"reasoning_content":"think","reasoning":"think"}}]}"#;
    let late = br#"{"choices":[{"delta":{"reasoning_content":"","reasoning":"hmm"}}]}"#;
    let one = |text: &str| {
        let mut sink = OutputSink::new(false);
        sink.take_text(text.as_bytes());
        sink.output_hash()
    };
    for path in [classify, classify_general] {
        let mut sink = OutputSink::new(true);
        let c = path(both, &mut sink).unwrap();
        assert_eq!((c.channel, c.text_len), (Channel::Reasoning, 5));
        assert_eq!(
            (sink.captured.as_str(), sink.output_hash()),
            ("think", one("think"))
        );
        let mut sink = OutputSink::new(true);
        let c = path(late, &mut sink).unwrap();
        assert_eq!((c.text_len, sink.captured.as_str()), (3, "hmm"));
    }
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
fn tool_call_name_and_arguments() {
    let c = run(
        r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":"}}]}}]}"#,
    );
    // "f" and `{"a":`
    assert_eq!((c.channel, c.text_len), (Channel::Tool, 1 + 5));
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

mod fast_matches_serde {
    use super::super::{classify_serde, fast, OutputSink, Scan};
    use proptest::prelude::*;
    use serde_json::{json, Value};

    fn text() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            "[a-z \n\"\\\\é😀\t\u{1}/]{0,12}".prop_map(Value::String),
            // Long enough for the eight-byte skip, with the byte it stops at anywhere.
            "[a-z0-9 é]{0,40}[\"\\\\\n]?[a-z]{0,9}".prop_map(Value::String),
        ]
    }

    fn count() -> impl Strategy<Value = Value> {
        prop_oneof![Just(Value::Null), (0u32..100_000).prop_map(|n| json!(n))]
    }

    /// A count as servers send it, and values no count may take.
    fn any_count() -> impl Strategy<Value = Value> {
        prop_oneof![
            count(),
            Just(json!(0)),
            Just(json!(4_294_967_296_u64)),
            Just(json!(1.5)),
            Just(json!(-1)),
        ]
    }

    /// Replace, in order, the text fields of `v` with `texts` and its usage numbers with
    /// `counts`.
    fn refill(
        v: &mut Value,
        key: Option<&str>,
        texts: &mut impl Iterator<Item = Value>,
        counts: &mut impl Iterator<Item = Value>,
    ) {
        const TEXTS: [&str; 5] = [
            "content",
            "reasoning_content",
            "reasoning",
            "text",
            "arguments",
        ];
        const COUNTS: [&str; 5] = [
            "prompt_tokens",
            "completion_tokens",
            "total_tokens",
            "reasoning_tokens",
            "cached_tokens",
        ];
        match v {
            Value::Object(fields) => {
                for (k, field) in fields.iter_mut() {
                    refill(field, Some(k), texts, counts);
                }
            }
            Value::Array(items) => {
                for item in items {
                    refill(item, None, texts, counts);
                }
            }
            Value::String(_) | Value::Null if key.is_some_and(|k| TEXTS.contains(&k)) => {
                *v = texts.next().unwrap_or(Value::Null);
            }
            Value::Number(_) | Value::Null if key.is_some_and(|k| COUNTS.contains(&k)) => {
                *v = counts.next().unwrap_or(Value::Null);
            }
            _ => {}
        }
    }

    fn usage() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            (count(), count(), count(), count(), any::<bool>()).prop_map(
                |(p, c, r, k, details)| {
                    let mut u =
                        json!({"prompt_tokens": p, "completion_tokens": c, "total_tokens": 7});
                    if details {
                        u["completion_tokens_details"] = json!({"reasoning_tokens": r});
                        u["prompt_tokens_details"] = json!({"cached_tokens": k, "audio_tokens": 0});
                    }
                    u
                }
            ),
        ]
    }

    fn delta() -> impl Strategy<Value = Value> {
        (
            prop::option::of(prop_oneof![Just(Value::Null), Just(json!("assistant"))]),
            prop::option::of(text()),
            prop::option::of(text()),
            prop::option::of(text()),
            prop::option::of(text()),
        )
            .prop_map(|(role, content, rc, r, args)| {
                let mut d = serde_json::Map::new();
                if let Some(v) = role {
                    d.insert("role".into(), v);
                }
                if let Some(v) = content {
                    d.insert("content".into(), v);
                }
                if let Some(v) = rc {
                    d.insert("reasoning_content".into(), v);
                }
                if let Some(v) = r {
                    d.insert("reasoning".into(), v);
                }
                if let Some(v) = args {
                    d.insert(
                        "tool_calls".into(),
                        json!([{"index": 0, "id": "c", "type": "function",
                                "function": {"name": "f", "arguments": v}}]),
                    );
                }
                Value::Object(d)
            })
    }

    fn choice() -> impl Strategy<Value = Value> {
        (
            delta(),
            prop::option::of(text()),
            prop_oneof![
                Just(Value::Null),
                Just(json!("stop")),
                Just(json!("length"))
            ],
            any::<bool>(),
        )
            .prop_map(|(delta, text, finish, logprobs)| {
                let mut c = json!({"index": 0, "delta": delta, "finish_reason": finish});
                if let Some(t) = text {
                    c["text"] = t;
                }
                c["logprobs"] = if logprobs {
                    json!({"content": [{"token": "a", "logprob": -0.5, "top_logprobs": []}]})
                } else {
                    Value::Null
                };
                c
            })
    }

    fn event() -> impl Strategy<Value = Value> {
        (
            prop::collection::vec(choice(), 0..3),
            usage(),
            any::<bool>(),
        )
            .prop_map(|(choices, usage, error)| {
                let mut e = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk",
                                   "created": 1_700_000_000, "model": "m", "choices": choices,
                                   "usage": usage});
                if error {
                    e["error"] = json!({"message": "x", "code": 500});
                }
                e
            })
    }

    /// Found by `same_result_on_valid_chunks`: nine texts in two choices are more than the fast
    /// path keeps; it gives up, and the classification serde makes is the result.
    #[test]
    fn more_texts_than_segments_are_left_to_serde() {
        let event = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk",
            "created": 1_700_000_000, "model": "m", "usage": null, "choices": [
            {"index": 0, "delta": {"content": "/", "reasoning_content": "/", "tool_calls": [
                {"index": 0, "id": "c", "type": "function",
                 "function": {"name": "f", "arguments": "\""}}]},
             "finish_reason": null, "logprobs": null},
            {"index": 0, "delta": {"content": " ", "reasoning": "\t", "tool_calls": [
                {"index": 0, "id": "c", "type": "function",
                 "function": {"name": "f", "arguments": "a"}}]},
             "finish_reason": null, "text": " ", "logprobs": null}]});
        assert_eq!(text_fields(&event), 9);
        let bytes = serde_json::to_vec(&event).unwrap();
        assert!(run_fast(&bytes).is_none());
        let (_, hash, bytes_out, captured) = run_serde(&bytes).unwrap();
        let mut sink = OutputSink::new(true);
        super::super::classify(&bytes, &mut sink).unwrap();
        assert_eq!(
            (sink.output_hash(), sink.output_bytes, sink.captured),
            (hash, bytes_out, captured)
        );
    }

    fn run_fast(data: &[u8]) -> Option<(Scan, u64, u64, String)> {
        let mut sink = OutputSink::new(true);
        let mut scan = Scan::default();
        fast::scan(data, &mut scan, &mut sink).ok()?;
        Some((scan, sink.output_hash(), sink.output_bytes, sink.captured))
    }

    fn run_serde(data: &[u8]) -> Option<(Scan, u64, u64, String)> {
        let mut sink = OutputSink::new(true);
        let mut scan = Scan::default();
        classify_serde(data, &mut scan, &mut sink).ok()?;
        Some((scan, sink.output_hash(), sink.output_bytes, sink.captured))
    }

    /// Non-empty text fields of an event: each is one segment of the fast path, which keeps at
    /// most `fast::MAX_SEGMENTS` and leaves events with more to serde.
    fn text_fields(event: &Value) -> usize {
        let text = |v: Option<&Value>| v.and_then(Value::as_str).is_some_and(|s| !s.is_empty());
        let mut n = 0;
        for choice in event["choices"].as_array().into_iter().flatten() {
            let delta = &choice["delta"];
            for key in ["content", "reasoning_content", "reasoning"] {
                n += usize::from(text(delta.get(key)));
            }
            n += usize::from(text(choice.get("text")));
            for call in delta["tool_calls"].as_array().into_iter().flatten() {
                for key in ["name", "arguments"] {
                    n += usize::from(text(call["function"].get(key)));
                }
            }
        }
        n
    }

    /// Where to damage an event, with which byte, and how (cut, replace, insert).
    type Damage = (prop::sample::Index, u8, u8);

    /// One event of a shape: its texts, its counts, and the damage done to it if any.
    type Variant = (Vec<Value>, Vec<Value>, Option<Damage>);

    /// Events of `shape` refilled with each variant's texts and counts, and damaged as it
    /// says, through one fast sink and one serde sink: the same result and running output,
    /// event by event.
    fn same_as_serde_event_by_event(
        shape: &Value,
        variants: Vec<Variant>,
    ) -> Result<(), TestCaseError> {
        let mut fast_sink = OutputSink::new(true);
        let mut serde_sink = OutputSink::new(true);
        for (texts, counts, damage) in variants {
            let mut event = shape.clone();
            refill(
                &mut event,
                None,
                &mut texts.into_iter().cycle(),
                &mut counts.into_iter().cycle(),
            );
            let bytes = damaged(serde_json::to_vec(&event).unwrap(), damage);
            same_as_serde(&bytes, &mut fast_sink, &mut serde_sink)?;
        }
        Ok(())
    }

    /// `bytes` with `damage` done to them, if any.
    fn damaged(mut bytes: Vec<u8>, damage: Option<Damage>) -> Vec<u8> {
        if let Some((cut, byte, mode)) = damage {
            let at = cut.index(bytes.len());
            match mode {
                0 => bytes.truncate(at),
                1 => bytes[at] = byte,
                _ => bytes.insert(at, byte),
            }
        }
        bytes
    }

    /// One event through a fast sink and a serde sink: the same result or the same refusal,
    /// and the same running output so far.
    fn same_as_serde(
        bytes: &[u8],
        fast_sink: &mut OutputSink,
        serde_sink: &mut OutputSink,
    ) -> Result<(), TestCaseError> {
        let fast = super::super::classify(bytes, fast_sink).ok();
        let serde = super::super::classify_general(bytes, serde_sink).ok();
        prop_assert_eq!(fast, serde, "{}", String::from_utf8_lossy(bytes));
        prop_assert_eq!(
            (
                fast_sink.output_hash(),
                fast_sink.output_bytes,
                &fast_sink.captured
            ),
            (
                serde_sink.output_hash(),
                serde_sink.output_bytes,
                &serde_sink.captured
            )
        );
        fast_sink.captured.clear();
        serde_sink.captured.clear();
        Ok(())
    }

    proptest! {
        #[test]
        fn same_result_on_valid_chunks(event in event()) {
            let bytes = serde_json::to_vec(&event).unwrap();
            let fast = run_fast(&bytes);
            if text_fields(&event) > fast::MAX_SEGMENTS {
                // Too many texts for its fixed segment table: it may give up, never differ.
                prop_assert!(fast.is_none() || fast == run_serde(&bytes));
            } else {
                prop_assert!(fast.is_some(), "the fast path gave up on {}", String::from_utf8_lossy(&bytes));
                prop_assert_eq!(fast, run_serde(&bytes));
            }
        }

        /// One sink across a stream, as in the recorder: events that open with the same
        /// ignored fields (scanned from after them once known), a head that changes midway, and
        /// events damaged anywhere, in the head too. Event by event, `classify` gives what the
        /// serde path gives: the same result or the same refusal, the same hash so far.
        #[test]
        fn a_stream_through_one_sink_classifies_as_serde_does(
            events in prop::collection::vec(
                (event(), 0usize..3, prop::option::of((any::<prop::sample::Index>(), any::<u8>(), 0u8..3))),
                1..6,
            )
        ) {
            let heads = [
                r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m","#,
                r#"{ "id" : "chatcmpl-1", "object":"chat.completion.chunk","created":1700000000,"model":"m","#,
                r#"{"id":"chatcmpl-2","system_fingerprint":null,"#,
            ];
            let mut fast_sink = OutputSink::new(true);
            let mut serde_sink = OutputSink::new(true);
            for (event, head, damage) in events {
                // The generated object's own fields after one of the heads.
                let body = serde_json::to_string(&event).unwrap();
                let bytes = damaged(format!("{}{}", heads[head], &body[1..]).into_bytes(), damage);
                same_as_serde(&bytes, &mut fast_sink, &mut serde_sink)?;
            }
        }

        /// One sink across events of one shape that differ in their text and counts (most of
        /// them checked against the stream's template and only those scanned), now and then
        /// damaged anywhere: event by event, `classify` gives what the serde path gives.
        #[test]
        fn events_of_one_shape_classify_as_serde_does(
            shape in event(),
            variants in prop::collection::vec(
                (
                    prop::collection::vec(text(), 6),
                    prop::collection::vec(any_count(), 6),
                    prop::option::of((any::<prop::sample::Index>(), any::<u8>(), 0u8..3)),
                ),
                1..8,
            )
        ) {
            same_as_serde_event_by_event(&shape, variants)?;
        }

        /// As above, with counts from a handful of values, so that a count often stays the
        /// same over several events (and is folded into the template) and then changes.
        #[test]
        fn events_whose_counts_stay_then_change_classify_as_serde_does(
            shape in event(),
            variants in prop::collection::vec(
                (
                    prop::collection::vec(text(), 6),
                    prop::collection::vec(
                        prop_oneof![
                            3 => Just(json!(7)),
                            1 => Just(json!(70)),
                            1 => Just(json!(0)),
                            1 => Just(Value::Null),
                            1 => Just(json!(7.5)),
                        ],
                        6,
                    ),
                    prop::option::weighted(0.1, (any::<prop::sample::Index>(), any::<u8>(), 0u8..3)),
                ),
                1..16,
            )
        ) {
            same_as_serde_event_by_event(&shape, variants)?;
        }

        /// Events of one shape, each framed as `data: …\n\n` or with CRLF in a read of its own (as a
        /// server that sends each event as an HTTP chunk hands them over), now and then with a
        /// line break or a blank put anywhere, a multi-line event, or another event's start:
        /// taken whole by the template where it can (`whole_known_event`) and fed to the
        /// parser otherwise, they give exactly the events, classifications, wire sizes and
        /// running output that the parser and `classify_event` give for every one.
        #[test]
        fn events_taken_whole_by_the_template_are_the_parsers(
            shape in event(),
            variants in prop::collection::vec(
                (
                    prop::collection::vec(text(), 6),
                    prop::collection::vec(
                        prop_oneof![3 => Just(json!(7)), 1 => count()],
                        6,
                    ),
                    prop::option::weighted(0.3, (any::<prop::sample::Index>(), 0usize..16)),
                    any::<bool>(),
                ),
                1..16,
            )
        ) {
            use super::super::{classify_event, Classified};
            use crate::parser::SseParser;
            // Line breaks and blanks; a blank alone is no line break and may be taken whole.
            const BREAKS: [&[u8]; 8] = [b"\n", b"\r", b" \n", b"\r\n", b"\n\ndata: ", b"\ndata: ", b" ", b" \t "];
            type Seen = Vec<(Vec<u8>, u32, Option<Classified>)>;
            let (mut parser, mut reference) = (SseParser::default(), SseParser::default());
            let (mut sink, mut reference_sink) = (OutputSink::new(true), OutputSink::new(true));
            for (texts, counts, line_break, crlf) in variants {
                let mut event = shape.clone();
                refill(&mut event, None, &mut texts.into_iter().cycle(), &mut counts.into_iter().cycle());
                let mut data = serde_json::to_vec(&event).unwrap();
                if let Some((at, which)) = line_break {
                    // Half of them just before a value (after a key's colon), where a hole
                    // of the template starts.
                    let colons: Vec<usize> = (0..data.len()).filter(|&i| data[i] == b':').map(|i| i + 1).collect();
                    let at = if which % 2 == 0 && !colons.is_empty() {
                        colons[at.index(colons.len())]
                    } else {
                        at.index(data.len() + 1)
                    };
                    data.splice(at..at, BREAKS[which % BREAKS.len()].iter().copied());
                }
                let mut wire = b"data: ".to_vec();
                wire.extend_from_slice(&data);
                wire.extend_from_slice(if crlf { b"\r\n\r\n" } else { b"\n\n" });

                let mut expected: Seen = Vec::new();
                reference.feed(&wire, |e| {
                    let c = classify_event(e.data, e.event_type, &mut reference_sink).ok();
                    expected.push((e.data.to_vec(), e.wire_bytes, c));
                }).unwrap();
                let mut seen: Seen = Vec::new();
                if let Some((e, c)) = parser.whole_known_event(&wire, &mut sink) {
                    seen.push((e.data.to_vec(), e.wire_bytes, Some(c)));
                } else {
                    parser.feed(&wire, |e| {
                        let c = classify_event(e.data, e.event_type, &mut sink).ok();
                        seen.push((e.data.to_vec(), e.wire_bytes, c));
                    }).unwrap();
                }
                prop_assert_eq!(&seen, &expected, "{}", String::from_utf8_lossy(&wire));
                prop_assert_eq!(
                    (sink.output_hash(), sink.output_bytes, &sink.captured),
                    (reference_sink.output_hash(), reference_sink.output_bytes, &reference_sink.captured)
                );
                prop_assert_eq!(parser.undispatched_bytes(), reference.undispatched_bytes());
                prop_assert_eq!(parser.has_pending(), reference.has_pending());
            }
        }

        #[test]
        fn never_accepts_what_serde_refuses(event in event(), cut in any::<prop::sample::Index>(),
                                            byte in any::<u8>(), mode in 0u8..3) {
            let bytes = damaged(serde_json::to_vec(&event).unwrap(), Some((cut, byte, mode)));
            if let Some(fast) = run_fast(&bytes) {
                prop_assert_eq!(Some(fast), run_serde(&bytes), "{}", String::from_utf8_lossy(&bytes));
            }
        }
    }
}

/// Some gateways put `"error": null` on every chunk; only an error value makes an error.
#[test]
fn a_null_error_field_is_no_error() {
    let chunk = br#"{"error":null,"choices":[{"index":0,"delta":{"content":"hi"}}]}"#;
    let usage = br#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1},"error":null}"#;
    let real = br#"{"error":{"message":"overloaded"},"choices":[]}"#;
    for path in [classify, classify_general] {
        let mut sink = OutputSink::new(false);
        let c = path(chunk, &mut sink).unwrap();
        assert_eq!((c.channel, c.text_len), (Channel::Content, 2));
        assert_eq!(path(usage, &mut sink).unwrap().channel, Channel::Usage);
        assert_eq!(path(real, &mut sink).unwrap().channel, Channel::Error);
    }
}

#[test]
fn whole_events_done_and_error_types() {
    let mut sink = OutputSink::new(false);
    let done = classify_event(b"[DONE]", b"", &mut sink).unwrap();
    assert_eq!(done.channel, Channel::Done);
    let spaced = classify_event(b" [DONE] ", b"", &mut sink).unwrap();
    assert_eq!(spaced.channel, Channel::Done);
    let typed = classify_event(br#"{"message":"boom"}"#, b"error", &mut sink).unwrap();
    assert_eq!(typed.channel, Channel::Error);
    let content = br#"{"choices":[{"delta":{"content":"a"}}]}"#;
    let c = classify_event(content, b"", &mut sink).unwrap();
    assert_eq!(c.channel, Channel::Content);
    assert!(classify_event(b"not json", b"", &mut sink).is_err());
}

/// Tool-call deltas carry output: the name and argument bytes count as text.
#[test]
fn tool_call_deltas_are_output() {
    let c = run(
        r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"get","arguments":"{\"a\""}}]}}]}"#,
    );
    assert_eq!((c.channel, c.text_len), (Channel::Tool, 3 + 4));
    assert!(c.channel.is_output());
}

/// Counts are read digit by digit in the fast path: every edge of the grammar and of u32 comes
/// out as serde has it (the value, or a refusal).
#[test]
fn counts_at_the_edges_read_as_serde_reads_them() {
    for count in [
        "0",
        "7",
        "4294967295",
        "4294967296",
        "9999999999",
        "99999999999",
        "01",
        " 12",
        "\n0",
        "-1",
        "-0",
        "1.0",
        "1e2",
        "1E2",
        "null",
        "\"3\"",
    ] {
        let event = format!(
            r#"{{"choices":[],"usage":{{"prompt_tokens":{count},"completion_tokens":2}}}}"#
        );
        let mut fast_sink = OutputSink::new(false);
        let mut serde_sink = OutputSink::new(false);
        assert_eq!(
            classify(event.as_bytes(), &mut fast_sink).ok(),
            classify_general(event.as_bytes(), &mut serde_sink).ok(),
            "{event}"
        );
    }
}

/// A stream's last event scanned whole is kept as its template: the next events that match it
/// outside their text and counts have only those scanned; the others are scanned from after the
/// template's head (the fields it opens with that the classification ignores) and replace it.
#[test]
fn a_streams_template_and_head_are_kept_for_its_next_events() {
    let head = r#"{"id":"chatcmpl-39e76df4b30ca4d6","object":"chat.completion.chunk","created":1796215904,"model":"sim","#;
    let event = |delta: &str, finish: &str, completion: u32| {
        format!(
            r#"{head}"choices":[{{"index":0,"delta":{delta},"logprobs":null,"finish_reason":{finish}}}],"usage":{{"prompt_tokens":7,"total_tokens":{},"completion_tokens":{completion}}}}}"#,
            7 + completion
        )
    };
    let mut sink = OutputSink::new(true);
    let role = event(r#"{"role":"assistant","content":""}"#, "null", 0);
    assert_eq!(
        classify(role.as_bytes(), &mut sink).unwrap().channel,
        Channel::Role
    );
    assert_eq!(sink.template.head(), head.as_bytes());
    // Its holes differ in kind from the role event's (a text where none was kept): scanned
    // whole, it becomes the template.
    let c = classify(
        event(r#"{"content":" slot"}"#, "null", 1).as_bytes(),
        &mut sink,
    )
    .unwrap();
    assert_eq!((c.channel, c.text_len), (Channel::Content, 5));
    assert_eq!(sink.template.replayed, 0);
    // Only text and counts differ: replayed, and read as a whole scan reads it.
    let next = event(r#"{"content":"s \"q\" é"}"#, "null", 2);
    let c = classify(next.as_bytes(), &mut sink).unwrap();
    assert_eq!(sink.template.replayed, 1);
    assert_eq!((c.channel, c.text_len), (Channel::Content, 8));
    assert_eq!(c.usage.and_then(|u| u.completion_tokens), Some(2));
    assert_eq!(c.usage.and_then(|u| u.prompt_tokens), Some(7));
    assert_eq!(sink.captured, " slots \"q\" é");
    // A finish reason where there was none: scanned whole from after the head.
    let last = event(r#"{"content":"."}"#, r#""stop""#, 3);
    let c = classify(last.as_bytes(), &mut sink).unwrap();
    assert_eq!(sink.template.replayed, 1);
    assert_eq!(
        c.finish_reason.map(|f| f.as_str().to_owned()).as_deref(),
        Some("stop")
    );
    assert_eq!(sink.template.head(), head.as_bytes());
    // An event whose object starts with a field it reads has no head.
    let choices_first = br#"{"choices":[{"index":0,"delta":{"content":"a"}}],"id":"x"}"#;
    classify(choices_first, &mut sink).unwrap();
    assert_eq!(sink.template.head(), b"");
    // A new head replaces the old one.
    let other_head = head.replace("39e76df4", "0123abcd");
    let other = last.replace(head, &other_head);
    classify(other.as_bytes(), &mut sink).unwrap();
    assert_eq!(sink.template.head(), other_head.as_bytes());
    // An event too long to be kept, with a head too long to be kept: the template stays.
    let long_head = format!(r#"{{"id":"{}","#, "x".repeat(2000));
    let long = last.replace(head, &long_head);
    classify(long.as_bytes(), &mut sink).unwrap();
    assert_eq!(sink.template.head(), other_head.as_bytes());
    classify(other.as_bytes(), &mut sink).unwrap();
    assert_eq!(sink.template.replayed, 2);
}

/// A count that stays the same over two events replayed in a row is folded into the template
/// (one hole fewer); when it changes after all, the event is scanned whole and read right.
#[test]
fn a_count_that_stays_is_folded_and_a_change_is_still_read() {
    let event = |text: &str, prompt: u32, completion: u32| {
        format!(
            r#"{{"id":"c","choices":[{{"index":0,"delta":{{"content":"{text}"}}}}],"usage":{{"prompt_tokens":{prompt},"total_tokens":{},"completion_tokens":{completion},"prompt_tokens_details":{{"cached_tokens":0}}}}}}"#,
            prompt + completion
        )
    };
    let mut sink = OutputSink::new(false);
    let read = |sink: &mut OutputSink, e: String| {
        let u = classify(e.as_bytes(), sink).unwrap().usage.unwrap();
        (u.prompt_tokens, u.completion_tokens, u.cached_tokens)
    };
    assert_eq!(
        read(&mut sink, event("a", 7, 1)),
        (Some(7), Some(1), Some(0))
    );
    // Holes: the text, three counts, `total_tokens`.
    assert_eq!(sink.template.holes(), 5);
    assert_eq!(
        read(&mut sink, event("b", 7, 2)),
        (Some(7), Some(2), Some(0))
    );
    assert_eq!(sink.template.holes(), 5);
    // The prompt and cached counts were the same in two replayed events: folded.
    assert_eq!(
        read(&mut sink, event("c", 7, 3)),
        (Some(7), Some(3), Some(0))
    );
    assert_eq!(sink.template.holes(), 3);
    assert_eq!(
        read(&mut sink, event("d", 7, 4)),
        (Some(7), Some(4), Some(0))
    );
    assert_eq!(sink.template.replayed, 3);
    // The prompt count changes: no match, scanned whole, learned again with all its holes.
    assert_eq!(
        read(&mut sink, event("e", 70, 5)),
        (Some(70), Some(5), Some(0))
    );
    assert_eq!(sink.template.replayed, 3);
    assert_eq!(sink.template.holes(), 5);
    assert_eq!(
        read(&mut sink, event("f", 70, 6)),
        (Some(70), Some(6), Some(0))
    );
    assert_eq!(sink.template.replayed, 4);
}

/// After a fold, the counts left as holes are still watched: one that then stays the same is
/// folded too.
#[test]
fn counts_left_after_a_fold_are_still_folded_when_they_stay() {
    let event = |text: &str, completion: u32| {
        format!(
            r#"{{"choices":[{{"delta":{{"content":"{text}"}}}}],"usage":{{"prompt_tokens":7,"total_tokens":{},"completion_tokens":{completion}}}}}"#,
            7 + completion
        )
    };
    let mut sink = OutputSink::new(false);
    for (text, completion) in [("a", 1), ("b", 2), ("c", 3)] {
        classify(event(text, completion).as_bytes(), &mut sink).unwrap();
    }
    // The prompt count is folded; the text, `total_tokens` and the completion count are left.
    assert_eq!(sink.template.holes(), 3);
    for (text, completion) in [("d", 4), ("e", 4)] {
        let c = classify(event(text, completion).as_bytes(), &mut sink).unwrap();
        assert_eq!(c.usage.and_then(|u| u.completion_tokens), Some(completion));
    }
    // The completion count and the total stayed the same in two replays in a row.
    assert_eq!(sink.template.holes(), 1);
    let c = classify(event("f", 5).as_bytes(), &mut sink).unwrap();
    assert_eq!(c.usage.and_then(|u| u.completion_tokens), Some(5));
}

/// A stream of one shape is taken whole by its template from its second event on; an event
/// whose data spans lines, or a line break before a value, never is, and the parser then
/// gives what it always gave.
#[test]
fn the_template_takes_one_line_events_whole_and_nothing_else() {
    use crate::parser::SseParser;
    let event = |text: &str, n: u32| {
        format!(
            "data: {{\"id\":\"c\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{text}\"}}}}],\"usage\":{{\"prompt_tokens\":3,\"completion_tokens\":{n}}}}}\n\n"
        )
    };
    let mut parser = SseParser::default();
    let mut sink = OutputSink::new(false);
    let first = event("a", 1);
    assert!(
        parser
            .whole_known_event(first.as_bytes(), &mut sink)
            .is_none(),
        "no template before the first event"
    );
    parser
        .feed(first.as_bytes(), |e| {
            classify_event(e.data, e.event_type, &mut sink).unwrap();
        })
        .unwrap();
    let second = event("bc", 2);
    let (e, c) = parser
        .whole_known_event(second.as_bytes(), &mut sink)
        .expect("the second event matches the first outside its values");
    assert_eq!(
        (e.wire_bytes as usize, c.channel),
        (second.len(), Channel::Content)
    );
    assert_eq!(c.usage.and_then(|u| u.completion_tokens), Some(2));
    assert_eq!(sink.output_hash(), xxhash_rust::xxh3::xxh3_64(b"abc"));
    // CRLF line ends, as sse-starlette (llama-cpp-python) sends them.
    let crlf = event("d", 3).replace("\n\n", "\r\n\r\n");
    let (e, c) = parser
        .whole_known_event(crlf.as_bytes(), &mut sink)
        .expect("CRLF line ends are taken whole too");
    assert_eq!((e.wire_bytes as usize, c.text_len), (crlf.len(), 1));

    // A blank then a line break before a value: valid JSON, one line to the template's
    // eye, but two lines to SSE.
    let broken = event("e", 4).replace("\"content\":", "\"content\": \n");
    assert!(parser
        .whole_known_event(broken.as_bytes(), &mut sink)
        .is_none());
    // An event that spans two `data:` lines, its data joined by a line break, becomes the
    // template when it classifies; the template then holds a line break and takes nothing.
    let spanning = "data: {\"choices\":[{\"delta\":{\"content\":\"e\"}}],\ndata: \"x\":1}\n\n";
    parser
        .feed(spanning.as_bytes(), |e| {
            assert_eq!(
                classify_event(e.data, e.event_type, &mut sink)
                    .unwrap()
                    .channel,
                Channel::Content
            );
        })
        .unwrap();
    let again = "data: {\"choices\":[{\"delta\":{\"content\":\"f\"}}],\n\"x\":1}\n\n";
    assert!(parser
        .whole_known_event(again.as_bytes(), &mut sink)
        .is_none());

    // Python's `json.dumps` puts a blank after every colon and comma (llama-cpp-python): the
    // blank before a value is no line break.
    let spaced = |text: &str, n: u32| {
        format!(
            "data: {{\"id\": \"c\", \"choices\": [{{\"index\": 0, \"delta\": {{\"content\": \"{text}\"}}}}], \"usage\": {{\"prompt_tokens\": 3, \"completion_tokens\": {n}}}}}\n\n"
        )
    };
    let (mut parser, mut sink) = (SseParser::default(), OutputSink::new(false));
    let first = spaced("a", 1);
    parser
        .feed(first.as_bytes(), |e| {
            classify_event(e.data, e.event_type, &mut sink).unwrap();
        })
        .unwrap();
    let (_, c) = parser
        .whole_known_event(spaced("bc", 2).as_bytes(), &mut sink)
        .expect("blanks before values are taken whole");
    assert_eq!(c.usage.and_then(|u| u.completion_tokens), Some(2));
}

proptest::proptest! {
    /// Text held back from the hasher changes nothing: after every piece, of any length on
    /// either side of what is held, the hash is xxh3 of all the text so far.
    #[test]
    fn the_output_hash_is_of_all_the_text_however_it_came(
        pieces in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..150), 0..40)
    ) {
        let mut sink = OutputSink::new(false);
        let mut all = Vec::new();
        for piece in pieces {
            sink.take_text(&piece);
            all.extend_from_slice(&piece);
            proptest::prop_assert_eq!(sink.output_hash(), xxhash_rust::xxh3::xxh3_64(&all));
            proptest::prop_assert_eq!(sink.output_bytes, all.len() as u64);
        }
    }
}
