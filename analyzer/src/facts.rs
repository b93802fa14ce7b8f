//! Per-request facts: everything any protocol needs from one request, in a few dozen bytes.
//!
//! A trace is streamed block by block; each request's chunk columns are folded into one
//! [`RequestFacts`] and then dropped, so memory grows with requests, not chunks. The one
//! exception is inter-chunk gaps, kept only when a protocol pools them ([`FactsOptions`]).

use tokentrace_format::{Channel, Outcome, Phase, RequestMeta, RequestRecord, Usage};

/// Whether a chunk is output: a delta that carried at least one byte of reasoning, content or
/// tool-call text (a tool call's function name and arguments). Role announcements, usage-only
/// events, finish-only events, `[DONE]` and empty deltas never are.
///
/// This is the one rule every output anchor, output chunk count and chunk-based token count
/// follows; a protocol may only decide, with [`ToolCalls`], not to count tool-call deltas.
#[inline]
pub fn is_output(channel: Channel, text_len: u32) -> bool {
    channel.is_output_text(text_len)
}

/// Whether a protocol counts tool-call deltas as output.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum ToolCalls {
    /// A non-empty tool-call delta is output of the answer kind: wherever a non-empty content
    /// delta counts (first/last content, content chunks, gaps, chunk token counts), it counts.
    #[default]
    Output,
    /// Tool-call deltas are not output; they are still events carrying a choice.
    Ignored,
}

/// The kind of an output chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OutputKind {
    /// Reasoning text.
    Reasoning,
    /// Content text, or a tool call when the protocol counts tool calls.
    Answer,
}

/// The output kind of a chunk under `tools`, None when it is not output.
#[inline]
fn output_kind(channel: Channel, text_len: u32, tools: ToolCalls) -> Option<OutputKind> {
    if !is_output(channel, text_len) {
        return None;
    }
    match channel {
        Channel::Reasoning => Some(OutputKind::Reasoning),
        Channel::Tool if tools == ToolCalls::Ignored => None,
        _ => Some(OutputKind::Answer),
    }
}

/// What the facts pass keeps beyond the fixed per-request summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FactsOptions {
    /// Keep every gap between consecutive gap chunks (8 bytes per chunk) for pooled ITL
    /// statistics and per-request gap percentiles.
    pub keep_gaps: bool,
    /// Which chunks the gaps run between.
    pub gap_chunks: GapChunks,
    /// Whether tool-call deltas are output.
    pub tool_calls: ToolCalls,
    /// Threads decoding blocks (0 or 1: the calling thread alone).
    pub threads: usize,
}

impl FactsOptions {
    /// The counting rules of these options.
    pub fn rules(&self) -> ChunkRules {
        ChunkRules {
            gap_chunks: self.gap_chunks,
            tool_calls: self.tool_calls,
        }
    }
}

/// How a protocol reads a request's chunks: which chunks the gaps run between and whether
/// tool-call deltas are output. A bare [`GapChunks`] converts with tool calls as output.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChunkRules {
    /// Which chunks the gaps run between.
    pub gap_chunks: GapChunks,
    /// Whether tool-call deltas are output.
    pub tool_calls: ToolCalls,
}

impl ChunkRules {
    /// Whether a chunk is output under these rules: [`is_output`], less tool-call deltas when
    /// the protocol ignores them.
    pub fn counts_as_output(&self, channel: Channel, text_len: u32) -> bool {
        output_kind(channel, text_len, self.tool_calls).is_some()
    }
}

impl From<GapChunks> for ChunkRules {
    fn from(gap_chunks: GapChunks) -> ChunkRules {
        ChunkRules {
            gap_chunks,
            tool_calls: ToolCalls::Output,
        }
    }
}

/// The chunks whose arrival gaps make up a protocol's inter-chunk latency.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum GapChunks {
    /// Output chunks ([`is_output`]): non-empty reasoning, content or (when counted) tool-call
    /// deltas.
    #[default]
    Output,
    /// Non-empty content (and, when counted, tool-call) deltas; reasoning ignored.
    Content,
    /// Every event carrying a choice: role, reasoning, content (even empty), tool, finish.
    Choices,
}

impl GapChunks {
    /// Whether a chunk of `channel` whose output kind is `kind` is a gap chunk.
    #[inline]
    fn includes(self, channel: Channel, kind: Option<OutputKind>) -> bool {
        match self {
            GapChunks::Output => kind.is_some(),
            GapChunks::Content => kind == Some(OutputKind::Answer),
            GapChunks::Choices => carries_choice(channel),
        }
    }
}

/// Whether an event carries a choice (role, reasoning, content even empty, tool, finish).
#[inline]
fn carries_choice(channel: Channel) -> bool {
    matches!(
        channel,
        Channel::Role | Channel::Reasoning | Channel::Content | Channel::Tool | Channel::Finish
    )
}

/// The compact summary of one request. Times are ns from the trace's clock anchor.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestFacts {
    /// Index of the trace in the analyzed set.
    pub trace: u32,
    /// Request id within its trace.
    pub id: u64,
    /// Warmup or measured.
    pub phase: Phase,
    /// Trial number.
    pub trial: u32,
    /// How the request ended.
    pub outcome: Outcome,
    /// HTTP status (0 when no response arrived).
    pub http_status: u16,
    /// When the schedule meant the request to start.
    pub intended_ns: u64,
    /// When the request was handed to the connection.
    pub send_ns: u64,
    /// When response headers arrived.
    pub headers_ns: Option<u64>,
    /// When the request ended (end of stream).
    pub end_ns: u64,
    /// First non-empty reasoning chunk.
    pub first_reasoning_ns: Option<u64>,
    /// First non-empty content chunk (or tool-call chunk, when tool calls are output).
    pub first_content_ns: Option<u64>,
    /// First output chunk ([`is_output`]).
    pub first_output_ns: Option<u64>,
    /// Second output chunk.
    pub second_output_ns: Option<u64>,
    /// Last non-empty content chunk (or tool-call chunk, when tool calls are output).
    pub last_content_ns: Option<u64>,
    /// Last output chunk.
    pub last_output_ns: Option<u64>,
    /// Non-empty reasoning chunks.
    pub reasoning_chunks: u32,
    /// Non-empty content chunks, plus non-empty tool-call chunks when tool calls are output.
    pub content_chunks: u32,
    /// Tool-call chunks, counted whether or not the protocol counts them as output.
    pub tool_chunks: u32,
    /// Every recorded chunk (any channel).
    pub total_chunks: u32,
    /// First event carrying a choice (role, reasoning, content, tool or finish).
    pub first_choice_ns: Option<u64>,
    /// Last event carrying a choice.
    pub last_choice_ns: Option<u64>,
    /// Chunks the gaps run between ([`FactsOptions::gap_chunks`]).
    pub gap_chunks: u32,
    /// Sum of known per-chunk token counts over output chunks.
    pub chunk_tokens: u64,
    /// Output chunks whose token count is known.
    pub chunks_with_tokens: u32,
    /// Largest gap between consecutive gap chunks.
    pub max_gap_ns: Option<u64>,
    /// Where this request's gaps start in the pooled gap list (when kept).
    pub gap_start: u64,
    /// Server-reported usage.
    pub usage: Usage,
    /// Input tokens the workload planned.
    pub planned_input_tokens: Option<u32>,
    /// Output tokens a client tokenizer counted (imported runs only).
    pub client_output_tokens: Option<u32>,
    /// Re-sends on a fresh connection after a closed keep-alive connection.
    pub retries: u8,
    /// Error text, for failed requests.
    pub error: Option<String>,
}

impl RequestFacts {
    /// Moves every time by `offset_ns` (a shard's times onto its run's clock).
    pub fn shift(&mut self, offset_ns: i64) {
        let at = |t: u64| tokentrace_format::shards::shift(t, offset_ns);
        self.intended_ns = at(self.intended_ns);
        self.send_ns = at(self.send_ns);
        self.end_ns = at(self.end_ns);
        for t in [
            &mut self.headers_ns,
            &mut self.first_reasoning_ns,
            &mut self.first_content_ns,
            &mut self.first_output_ns,
            &mut self.second_output_ns,
            &mut self.last_content_ns,
            &mut self.last_output_ns,
            &mut self.first_choice_ns,
            &mut self.last_choice_ns,
        ] {
            *t = t.map(at);
        }
    }

    /// Output chunks: non-empty reasoning plus non-empty content (tool calls included when
    /// they are output).
    pub fn output_chunks(&self) -> u32 {
        self.reasoning_chunks + self.content_chunks
    }

    /// Gaps between consecutive gap chunks.
    pub fn gap_count(&self) -> u32 {
        self.gap_chunks.saturating_sub(1)
    }

    /// Whether the request succeeded.
    pub fn is_ok(&self) -> bool {
        self.outcome == Outcome::Ok
    }

    /// This request's gaps from the pooled list (empty when gaps were not kept).
    pub fn gaps<'a>(&self, pooled: &'a [u64]) -> &'a [u64] {
        let start = self.gap_start as usize;
        let end = start + self.gap_count() as usize;
        pooled.get(start..end).unwrap_or(&[])
    }
}

/// Borrowed chunk columns of one request.
#[derive(Debug, Clone, Copy)]
pub struct ChunkSlice<'a> {
    /// Arrival times.
    pub arrival_ns: &'a [u64],
    /// Channels.
    pub channel: &'a [Channel],
    /// Text lengths.
    pub text_len: &'a [u32],
    /// Tokens per chunk when known.
    pub tokens: &'a [Option<u32>],
}

/// Folds one request into facts under `rules` (a [`GapChunks`] alone counts tool calls as
/// output), appending its gaps to `gaps` when given.
pub fn summarize(
    trace: u32,
    head: &RequestMeta,
    chunks: ChunkSlice<'_>,
    rules: impl Into<ChunkRules>,
    gaps: Option<&mut Vec<u64>>,
) -> RequestFacts {
    let rules = rules.into();
    let mut facts = RequestFacts {
        trace,
        id: head.id,
        phase: head.phase,
        trial: head.trial,
        outcome: head.outcome,
        http_status: head.http_status,
        intended_ns: head.intended_ns,
        send_ns: head.send_ns,
        headers_ns: head.headers_ns,
        end_ns: head.end_ns,
        first_reasoning_ns: None,
        first_content_ns: None,
        first_output_ns: None,
        second_output_ns: None,
        last_content_ns: None,
        last_output_ns: None,
        reasoning_chunks: 0,
        content_chunks: 0,
        tool_chunks: 0,
        total_chunks: chunks.arrival_ns.len() as u32,
        first_choice_ns: None,
        last_choice_ns: None,
        gap_chunks: 0,
        chunk_tokens: 0,
        chunks_with_tokens: 0,
        max_gap_ns: None,
        gap_start: 0,
        usage: head.usage,
        planned_input_tokens: head.planned_input_tokens,
        client_output_tokens: None,
        retries: head.retries,
        error: if head.outcome == Outcome::Ok {
            None
        } else {
            head.error.clone()
        },
    };
    let mut gaps = gaps;
    if let Some(g) = gaps.as_deref() {
        facts.gap_start = g.len() as u64;
    }
    let mut max_gap = 0u64;
    let mut last_gap_chunk: Option<u64> = None;
    let n = chunks
        .arrival_ns
        .len()
        .min(chunks.channel.len())
        .min(chunks.text_len.len())
        .min(chunks.tokens.len());
    for i in 0..n {
        let channel = chunks.channel[i];
        let text_len = chunks.text_len[i];
        let t = chunks.arrival_ns[i];
        let kind = output_kind(channel, text_len, rules.tool_calls);
        if carries_choice(channel) {
            facts.first_choice_ns.get_or_insert(t);
            facts.last_choice_ns = Some(t);
        }
        if rules.gap_chunks.includes(channel, kind) {
            facts.gap_chunks += 1;
            if let Some(prev) = last_gap_chunk {
                let gap = t.saturating_sub(prev);
                max_gap = max_gap.max(gap);
                if let Some(g) = gaps.as_deref_mut() {
                    g.push(gap);
                }
            }
            last_gap_chunk = Some(t);
        }
        if channel == Channel::Tool {
            facts.tool_chunks += 1;
        }
        // Role, usage, finish and done events carry no text a user sees (`is_output`).
        let Some(kind) = kind else {
            continue;
        };
        if kind == OutputKind::Reasoning {
            facts.reasoning_chunks += 1;
            facts.first_reasoning_ns.get_or_insert(t);
        } else {
            facts.content_chunks += 1;
            facts.first_content_ns.get_or_insert(t);
            facts.last_content_ns = Some(t);
        }
        if let Some(tokens) = chunks.tokens[i] {
            facts.chunk_tokens += u64::from(tokens);
            facts.chunks_with_tokens += 1;
        }
        if facts.first_output_ns.is_none() {
            facts.first_output_ns = Some(t);
        } else if facts.second_output_ns.is_none() {
            facts.second_output_ns = Some(t);
        }
        facts.last_output_ns = Some(t);
    }
    if facts.gap_chunks >= 2 {
        facts.max_gap_ns = Some(max_gap);
    }
    facts
}

/// Splits a materialized record into head and columns and summarizes it under `rules`
/// (tests, importers).
pub fn summarize_record(
    trace: u32,
    record: &RequestRecord,
    rules: impl Into<ChunkRules>,
    gaps: Option<&mut Vec<u64>>,
) -> RequestFacts {
    let arrival: Vec<u64> = record.chunks.iter().map(|c| c.arrival_ns).collect();
    let channel: Vec<Channel> = record.chunks.iter().map(|c| c.channel).collect();
    let text_len: Vec<u32> = record.chunks.iter().map(|c| c.text_len).collect();
    let tokens: Vec<Option<u32>> = record.chunks.iter().map(|c| c.tokens).collect();
    let slice = ChunkSlice {
        arrival_ns: &arrival,
        channel: &channel,
        text_len: &text_len,
        tokens: &tokens,
    };
    summarize(trace, &record.meta, slice, rules, gaps)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use tokentrace_format::ChunkRecord;

    /// A chunk for the facts tests.
    pub(crate) fn chunk(
        arrival_ns: u64,
        channel: Channel,
        text_len: u32,
        tokens: Option<u32>,
    ) -> ChunkRecord {
        ChunkRecord {
            arrival_ns,
            read_index: 0,
            bytes: 10,
            channel,
            text_len,
            tokens,
            text: None,
        }
    }

    /// A successful measured request sent at 1 µs, ended at 9 µs, carrying `chunks`.
    pub(crate) fn record(chunks: Vec<ChunkRecord>) -> RequestRecord {
        RequestRecord {
            meta: RequestMeta {
                id: 7,
                phase: Phase::Measured,
                trial: 0,
                intended_ns: 900,
                send_ns: 1_000,
                headers_ns: Some(1_500),
                end_ns: 9_000,
                http_status: 200,
                outcome: Outcome::Ok,
                error: None,
                usage: Usage::default(),
                finish_reason: None,
                prompt_hash: 0,
                prompt_bytes: 0,
                output_hash: 0,
                output_bytes: 0,
                planned_input_tokens: None,
                response_headers: vec![],
                retries: 0,
            },
            chunks,
        }
    }

    #[test]
    fn first_chunks_skip_empty_and_non_output_events() {
        let r = record(vec![
            chunk(2_000, Channel::Role, 0, None),
            chunk(2_500, Channel::Reasoning, 0, None),
            chunk(3_000, Channel::Reasoning, 5, Some(1)),
            chunk(4_000, Channel::Reasoning, 5, Some(2)),
            chunk(4_500, Channel::Content, 0, None),
            chunk(6_000, Channel::Content, 3, Some(1)),
            chunk(7_000, Channel::Content, 3, None),
            chunk(8_000, Channel::Usage, 0, None),
            chunk(8_500, Channel::Done, 0, None),
        ]);
        let mut gaps = vec![42];
        let f = summarize_record(0, &r, GapChunks::Output, Some(&mut gaps));
        assert_eq!(f.first_reasoning_ns, Some(3_000));
        assert_eq!(f.first_content_ns, Some(6_000));
        assert_eq!(f.first_output_ns, Some(3_000));
        assert_eq!(f.second_output_ns, Some(4_000));
        assert_eq!(f.last_content_ns, Some(7_000));
        assert_eq!(f.last_output_ns, Some(7_000));
        assert_eq!(
            (f.reasoning_chunks, f.content_chunks, f.total_chunks),
            (2, 2, 9)
        );
        assert_eq!((f.chunk_tokens, f.chunks_with_tokens), (4, 3));
        assert_eq!(f.max_gap_ns, Some(2_000));
        assert_eq!(f.gap_start, 1);
        assert_eq!(f.gaps(&gaps), &[1_000, 2_000, 1_000]);
        assert_eq!(
            (f.first_choice_ns, f.last_choice_ns),
            (Some(2_000), Some(7_000))
        );
        let content = summarize_record(0, &r, GapChunks::Content, None);
        assert_eq!((content.gap_chunks, content.max_gap_ns), (2, Some(1_000)));
        // Choices: role, both reasoning, the empty content delta and both content deltas.
        let choices = summarize_record(0, &r, GapChunks::Choices, None);
        assert_eq!((choices.gap_chunks, choices.max_gap_ns), (7, Some(1_500)));
    }

    /// A stream of tool-call deltas only: role, an empty tool delta (id and type, no text),
    /// two with name/arguments text, finish, usage, `[DONE]`.
    pub(crate) fn tool_call_stream() -> RequestRecord {
        record(vec![
            chunk(2_000, Channel::Role, 0, None),
            chunk(2_500, Channel::Tool, 0, None),
            chunk(3_000, Channel::Tool, 12, None),
            chunk(5_000, Channel::Tool, 20, None),
            chunk(6_000, Channel::Finish, 0, None),
            chunk(7_000, Channel::Usage, 0, None),
            chunk(8_000, Channel::Done, 0, None),
        ])
    }

    #[test]
    fn tool_call_deltas_are_output_unless_the_protocol_ignores_them() {
        assert!(is_output(Channel::Tool, 1));
        assert!(!is_output(Channel::Tool, 0));
        assert!(!is_output(Channel::Role, 4) && !is_output(Channel::Finish, 4));
        let r = tool_call_stream();
        let mut gaps = Vec::new();
        let f = summarize_record(0, &r, GapChunks::Output, Some(&mut gaps));
        assert_eq!(
            (f.first_output_ns, f.second_output_ns, f.last_output_ns),
            (Some(3_000), Some(5_000), Some(5_000))
        );
        // Counted as content is: the first answer a client sees.
        assert_eq!(
            (f.first_content_ns, f.last_content_ns),
            (Some(3_000), Some(5_000))
        );
        assert_eq!(
            (f.content_chunks, f.output_chunks(), f.tool_chunks),
            (2, 2, 3)
        );
        assert_eq!(f.gaps(&gaps), &[2_000]);
        let content = summarize_record(0, &r, GapChunks::Content, None);
        assert_eq!(content.gap_chunks, 2);

        let ignored = ChunkRules {
            gap_chunks: GapChunks::Output,
            tool_calls: ToolCalls::Ignored,
        };
        assert!(!ignored.counts_as_output(Channel::Tool, 5));
        assert!(ChunkRules::from(GapChunks::Output).counts_as_output(Channel::Tool, 5));
        let f = summarize_record(0, &r, ignored, None);
        assert_eq!((f.first_output_ns, f.first_content_ns), (None, None));
        assert_eq!((f.output_chunks(), f.tool_chunks, f.gap_chunks), (0, 3, 0));
        // Still events carrying a choice.
        assert_eq!(
            (f.first_choice_ns, f.last_choice_ns),
            (Some(2_000), Some(6_000))
        );
    }

    #[test]
    fn a_request_without_output_has_no_output_times() {
        let f = summarize_record(
            0,
            &record(vec![chunk(2_000, Channel::Role, 0, None)]),
            GapChunks::Output,
            None,
        );
        assert_eq!(f.first_output_ns, None);
        assert_eq!(f.max_gap_ns, None);
        assert_eq!(f.gap_count(), 0);
    }
}

#[cfg(test)]
mod size {
    /// Facts are kept for every request of a trace: keep them compact (docs/PERFORMANCE.md).
    #[test]
    fn request_facts_stay_compact() {
        let size = std::mem::size_of::<super::RequestFacts>();
        assert!(size <= 320, "RequestFacts grew to {size} bytes");
    }
}
