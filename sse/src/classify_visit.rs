//! The serde visitors behind [`super::classify`]: one per JSON object level of a stream chunk.

use super::{FinishReason, OutputSink, Scan};
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::fmt;
use tokentrace_format::Usage;

/// Which text field a string belongs to.
#[derive(Clone, Copy)]
enum TextKind {
    Reasoning,
    Content,
    Tool,
}

/// Walks a whole stream chunk object into a [`Scan`].
pub(crate) struct EventSeed<'s> {
    pub(crate) scan: &'s mut Scan,
    pub(crate) sink: &'s mut OutputSink,
}

/// Walks a map, handing each key to `on_key` (which must consume the value) and skipping
/// values whose key it does not claim.
macro_rules! map_visitor {
    ($name:ident, $expect:literal, |$self_:ident, $key:ident, $map:ident| $body:block) => {
        impl<'de, 's> Visitor<'de> for $name<'s> {
            type Value = ();
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str($expect)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut $map: A) -> Result<(), A::Error> {
                let $self_ = self;
                while let Some($key) = $map.next_key::<Key<'de>>()? {
                    $body
                }
                Ok(())
            }
            fn visit_unit<E: de::Error>(self) -> Result<(), E> {
                Ok(())
            }
        }
        impl<'de, 's> DeserializeSeed<'de> for $name<'s> {
            type Value = ();
            fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
                d.deserialize_any(self)
            }
        }
    };
}

/// An object key, borrowed when the input allows.
struct Key<'de>(std::borrow::Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // serde's own `Cow<str>` always allocates; this visitor borrows when it can.
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

/// A `finish_reason` string read without allocating.
struct Finish(FinishReason);

impl<'de> Deserialize<'de> for Finish {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Finish;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a finish reason string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Finish, E> {
                Ok(Finish(FinishReason::new(v)))
            }
        }
        d.deserialize_str(V)
    }
}

map_visitor!(EventSeed, "a stream chunk object", |this, key, map| {
    match key.0.as_ref() {
        "choices" => map.next_value_seed(ChoicesSeed {
            scan: &mut *this.scan,
            sink: &mut *this.sink,
        })?,
        "usage" => this.scan.usage = map.next_value::<Option<UsageJson>>()?.map(Usage::from),
        // Some gateways send `"error": null` on every chunk: only a value is an error.
        "error" => this.scan.error = map.next_value::<Option<IgnoredAny>>()?.is_some(),
        _ => {
            map.next_value::<IgnoredAny>()?;
        }
    }
});

struct ChoicesSeed<'s> {
    scan: &'s mut Scan,
    sink: &'s mut OutputSink,
}

impl<'de> Visitor<'de> for ChoicesSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a choices array")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq
            .next_element_seed(ChoiceSeed {
                scan: &mut *self.scan,
                sink: &mut *self.sink,
            })?
            .is_some()
        {}
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for ChoicesSeed<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

struct ChoiceSeed<'s> {
    scan: &'s mut Scan,
    sink: &'s mut OutputSink,
}

map_visitor!(ChoiceSeed, "a choice object", |this, key, map| {
    match key.0.as_ref() {
        "delta" => map.next_value_seed(DeltaSeed {
            scan: &mut *this.scan,
            sink: &mut *this.sink,
            reasoning_taken: std::cell::Cell::new(false),
        })?,
        // The completions API streams `text` directly on the choice.
        "text" => map.next_value_seed(TextSeed {
            kind: TextKind::Content,
            scan: &mut *this.scan,
            sink: &mut *this.sink,
        })?,
        "finish_reason" => {
            if let Some(Finish(reason)) = map.next_value::<Option<Finish>>()? {
                this.scan.finish_reason = Some(reason);
            }
        }
        "logprobs" => map.next_value_seed(LogprobsSeed {
            scan: &mut *this.scan,
        })?,
        _ => {
            map.next_value::<IgnoredAny>()?;
        }
    }
});

struct DeltaSeed<'s> {
    scan: &'s mut Scan,
    sink: &'s mut OutputSink,
    /// Whether a reasoning field of this delta already had text: servers moving from
    /// `reasoning_content` to `reasoning` send the same text under both names.
    reasoning_taken: std::cell::Cell<bool>,
}

map_visitor!(DeltaSeed, "a delta object", |this, key, map| {
    let kind = match key.0.as_ref() {
        "content" => Some(TextKind::Content),
        "reasoning_content" | "reasoning" if this.reasoning_taken.get() => {
            map.next_value::<IgnoredAny>()?;
            None
        }
        "reasoning_content" | "reasoning" => Some(TextKind::Reasoning),
        "role" => {
            if map.next_value::<Option<IgnoredAny>>()?.is_some() {
                this.scan.role = true;
            }
            None
        }
        "tool_calls" => {
            map.next_value_seed(ToolCallsSeed {
                scan: &mut *this.scan,
                sink: &mut *this.sink,
            })?;
            None
        }
        _ => {
            map.next_value::<IgnoredAny>()?;
            None
        }
    };
    if let Some(kind) = kind {
        let reasoning_before = this.scan.reasoning_len;
        map.next_value_seed(TextSeed {
            kind,
            scan: &mut *this.scan,
            sink: &mut *this.sink,
        })?;
        if this.scan.reasoning_len > reasoning_before {
            this.reasoning_taken.set(true);
        }
    }
});

struct ToolCallsSeed<'s> {
    scan: &'s mut Scan,
    sink: &'s mut OutputSink,
}

impl<'de> Visitor<'de> for ToolCallsSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a tool_calls array")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq
            .next_element_seed(ToolCallSeed {
                scan: &mut *self.scan,
                sink: &mut *self.sink,
            })?
            .is_some()
        {
            self.scan.tool = true;
        }
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for ToolCallsSeed<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

struct ToolCallSeed<'s> {
    scan: &'s mut Scan,
    sink: &'s mut OutputSink,
}

map_visitor!(ToolCallSeed, "a tool call object", |this, key, map| {
    match key.0.as_ref() {
        "function" => map.next_value_seed(FunctionSeed {
            scan: &mut *this.scan,
            sink: &mut *this.sink,
        })?,
        _ => {
            map.next_value::<IgnoredAny>()?;
        }
    }
});

struct FunctionSeed<'s> {
    scan: &'s mut Scan,
    sink: &'s mut OutputSink,
}

map_visitor!(FunctionSeed, "a function object", |this, key, map| {
    match key.0.as_ref() {
        // The first delta of a call names the function with empty arguments: the name is
        // output too.
        "name" | "arguments" => map.next_value_seed(TextSeed {
            kind: TextKind::Tool,
            scan: &mut *this.scan,
            sink: &mut *this.sink,
        })?,
        _ => {
            map.next_value::<IgnoredAny>()?;
        }
    }
});

struct LogprobsSeed<'s> {
    scan: &'s mut Scan,
}

impl<'de> Visitor<'de> for LogprobsSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a logprobs object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Key<'de>>()? {
            if key.0 == "content" || key.0 == "tokens" {
                let count = map.next_value::<Option<CountSeq>>()?;
                if let Some(CountSeq(n)) = count {
                    *self.scan.logprob_tokens.get_or_insert(0) += n;
                }
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for LogprobsSeed<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

/// Counts the elements of an array without keeping them.
struct CountSeq(u32);

impl<'de> Deserialize<'de> for CountSeq {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = CountSeq;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<CountSeq, A::Error> {
                let mut n = 0;
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    n += 1;
                }
                Ok(CountSeq(n))
            }
        }
        d.deserialize_seq(V)
    }
}

struct TextSeed<'s> {
    kind: TextKind,
    scan: &'s mut Scan,
    sink: &'s mut OutputSink,
}

impl TextSeed<'_> {
    fn take(self, text: &str) {
        let len = u32::try_from(text.len()).unwrap_or(u32::MAX);
        let slot = match self.kind {
            TextKind::Reasoning => &mut self.scan.reasoning_len,
            TextKind::Content => &mut self.scan.content_len,
            TextKind::Tool => &mut self.scan.tool_len,
        };
        *slot = slot.saturating_add(len);
        self.sink.take_text(text.as_bytes());
    }
}

impl<'de> Visitor<'de> for TextSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string or null")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.take(v);
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for TextSeed<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

/// `usage` as servers send it; unknown fields are ignored.
#[derive(Deserialize)]
struct UsageJson {
    prompt_tokens: Option<u32>,
    completion_tokens: Option<u32>,
    prompt_tokens_details: Option<PromptDetails>,
    completion_tokens_details: Option<CompletionDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    cached_tokens: Option<u32>,
}

#[derive(Deserialize)]
struct CompletionDetails {
    reasoning_tokens: Option<u32>,
}

impl From<UsageJson> for Usage {
    fn from(u: UsageJson) -> Usage {
        Usage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            reasoning_tokens: u.completion_tokens_details.and_then(|d| d.reasoning_tokens),
            cached_tokens: u.prompt_tokens_details.and_then(|d| d.cached_tokens),
        }
    }
}
