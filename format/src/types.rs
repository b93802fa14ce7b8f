//! The record model of a trace: what the recorder writes and the analyzer reads.
//!
//! Every time is u64 nanoseconds on CLOCK_MONOTONIC, relative to the trace's clock anchor
//! ([`ClockAnchor::mono_ns`]). Types here are plain data; how they are laid out in bytes is the
//! business of the codec module and docs/FORMAT.md.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// CLOCK_MONOTONIC and CLOCK_REALTIME read back to back when the trace was opened, so event
/// times (monotonic, relative to `mono_ns`) can be mapped to wall-clock time and other logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockAnchor {
    /// CLOCK_MONOTONIC in ns at the anchor.
    pub mono_ns: u64,
    /// CLOCK_REALTIME in ns since the Unix epoch at the anchor.
    pub realtime_ns: u64,
}

/// Fixed facts about the file, written first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// Format major version; a reader refuses a major it does not know.
    pub major: u16,
    /// Format minor version; additions a v1 reader may ignore.
    pub minor: u16,
    /// Clock anchor of every event time in the file.
    pub anchor: ClockAnchor,
    /// Host name of the recording machine.
    pub host: String,
    /// Shard id when one run is recorded by several processes (0 otherwise).
    pub shard: u32,
}

/// Whether a request counts in the measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(u8)]
pub enum Phase {
    /// Sent to warm the server; excluded from metrics by default.
    Warmup = 0,
    /// Part of the measurement.
    Measured = 1,
}

/// How a request ended, as a class; the message is in [`RequestMeta::error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(u8)]
pub enum Outcome {
    /// Stream completed (or a non-stream response arrived) with HTTP success.
    Ok = 0,
    /// The server answered with HTTP status >= 400.
    HttpError = 1,
    /// No connection could be made (refused, DNS, TLS handshake).
    ConnectError = 2,
    /// The connection broke after the response started (reset, EOF mid-event).
    StreamError = 3,
    /// The whole-request timeout fired.
    Timeout = 4,
    /// No first output arrived within the TTFT timeout.
    TtftTimeout = 5,
    /// An event could not be parsed as the API's JSON.
    Malformed = 6,
    /// A line exceeded the configured size limit.
    Oversize = 7,
    /// The run was interrupted while the request was in flight.
    Cancelled = 8,
    /// The stream ended cleanly at an event boundary after a `finish_reason`, but without
    /// `data: [DONE]` (older TGI, some llama.cpp forks). The output is complete; each protocol
    /// says whether it counts as a success. A stream cut before any `finish_reason` is a
    /// [`Outcome::StreamError`] instead.
    MissingDone = 9,
    /// Anything else.
    Other = 10,
    /// A 2xx answer that was not an event stream (a JSON body, an HTML page); the error text
    /// names its content type. Format 1.2; a 1.1 reader sees `malformed`.
    NotEventStream = 11,
    /// A body in a content encoding the recorder does not decode (gzip, br, …), named in the
    /// error text. Format 1.2; a 1.1 reader sees `malformed`.
    UnsupportedEncoding = 12,
    /// A 3xx answer; the error text holds the `Location`. Format 1.2; a 1.1 reader sees
    /// `http_error`.
    Redirect = 13,
    /// Still streaming when the recorder stopped without finishing the trace (killed): the
    /// request as of its last checkpoint, with every chunk that checkpoint held. Readers
    /// present it; a writer never receives one. Format 1.2; a 1.1 reader does not see it.
    Interrupted = 14,
}

impl Outcome {
    /// Every outcome, in code order.
    pub const ALL: [Outcome; 15] = [
        Outcome::Ok,
        Outcome::HttpError,
        Outcome::ConnectError,
        Outcome::StreamError,
        Outcome::Timeout,
        Outcome::TtftTimeout,
        Outcome::Malformed,
        Outcome::Oversize,
        Outcome::Cancelled,
        Outcome::MissingDone,
        Outcome::Other,
        Outcome::NotEventStream,
        Outcome::UnsupportedEncoding,
        Outcome::Redirect,
        Outcome::Interrupted,
    ];

    /// The stable lower-case name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::HttpError => "http_error",
            Outcome::ConnectError => "connect_error",
            Outcome::StreamError => "stream_error",
            Outcome::Timeout => "timeout",
            Outcome::TtftTimeout => "ttft_timeout",
            Outcome::Malformed => "malformed",
            Outcome::Oversize => "oversize",
            Outcome::Cancelled => "cancelled",
            Outcome::MissingDone => "missing_done",
            Outcome::Other => "other",
            Outcome::NotEventStream => "not_event_stream",
            Outcome::UnsupportedEncoding => "unsupported_encoding",
            Outcome::Redirect => "redirect",
            Outcome::Interrupted => "interrupted",
        }
    }

    /// Decode a code byte.
    pub fn from_code(code: u8) -> Option<Outcome> {
        Outcome::ALL.get(code as usize).copied()
    }

    /// The code a format 1.0/1.1 reader understands: the outcome's own code for the classes
    /// 1.0 had, else the nearest of those (docs/FORMAT.md, section 4.6).
    pub fn legacy_code(self) -> u8 {
        match self {
            Outcome::NotEventStream | Outcome::UnsupportedEncoding => Outcome::Malformed as u8,
            Outcome::Redirect => Outcome::HttpError as u8,
            Outcome::Interrupted => Outcome::Cancelled as u8,
            other => other as u8,
        }
    }
}

/// What one SSE event carried, as the recorder classified it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(u8)]
pub enum Channel {
    /// The role announcement (`delta.role` with no text).
    Role = 0,
    /// Reasoning text (`reasoning_content` or `reasoning`).
    Reasoning = 1,
    /// Visible content text.
    Content = 2,
    /// Tool-call deltas.
    Tool = 3,
    /// A usage-only event (empty choices with `usage`).
    Usage = 4,
    /// A choice with `finish_reason` and no text.
    Finish = 5,
    /// The `[DONE]` sentinel.
    Done = 6,
    /// An error object sent inside the stream.
    Error = 7,
    /// Anything else (empty deltas, comments-only events are not recorded).
    Other = 8,
}

impl Channel {
    /// Every channel, in code order.
    pub const ALL: [Channel; 9] = [
        Channel::Role,
        Channel::Reasoning,
        Channel::Content,
        Channel::Tool,
        Channel::Usage,
        Channel::Finish,
        Channel::Done,
        Channel::Error,
        Channel::Other,
    ];

    /// The stable lower-case name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Channel::Role => "role",
            Channel::Reasoning => "reasoning",
            Channel::Content => "content",
            Channel::Tool => "tool",
            Channel::Usage => "usage",
            Channel::Finish => "finish",
            Channel::Done => "done",
            Channel::Error => "error",
            Channel::Other => "other",
        }
    }

    /// Decode a code byte.
    pub fn from_code(code: u8) -> Option<Channel> {
        Channel::ALL.get(code as usize).copied()
    }
}

impl Channel {
    /// Whether the channel carries model output: reasoning, content or tool-call deltas.
    pub fn is_output(self) -> bool {
        matches!(self, Channel::Reasoning | Channel::Content | Channel::Tool)
    }

    /// The one rule for "this chunk is output": an output channel with text (`text_len`
    /// bytes of it). [`ChunkRecord::is_output`] and columnar readers both apply it.
    pub fn is_output_text(self, text_len: u32) -> bool {
        self.is_output() && text_len > 0
    }

    /// Whether a chunk is visible content with text: what the first-content anchor (and a
    /// recorder's live TTFT) looks for.
    pub fn is_content_text(self, text_len: u32) -> bool {
        self == Channel::Content && text_len > 0
    }
}

/// Token counts the server reported (`usage`), each absent when not sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// `usage.prompt_tokens`.
    pub prompt_tokens: Option<u32>,
    /// `usage.completion_tokens` (includes reasoning tokens on most servers).
    pub completion_tokens: Option<u32>,
    /// `usage.completion_tokens_details.reasoning_tokens`.
    pub reasoning_tokens: Option<u32>,
    /// `usage.prompt_tokens_details.cached_tokens`.
    pub cached_tokens: Option<u32>,
}

/// One streamed SSE event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkRecord {
    /// When the bytes holding the event's end arrived, before any parsing (ns from anchor): the
    /// kernel's receive time of the socket read that returned them where the recorder's host
    /// provides it (Linux `SO_TIMESTAMPNS`, moved onto CLOCK_MONOTONIC), otherwise the
    /// monotonic clock read when that read returned.
    pub arrival_ns: u64,
    /// 0-based index of the body read (frame) of this response that completed the event;
    /// events sharing a read share its arrival time.
    pub read_index: u32,
    /// Bytes of the event on the wire (its `data:` lines and terminator).
    pub bytes: u32,
    /// What the event carried.
    pub channel: Channel,
    /// UTF-8 bytes of text in the event: reasoning, content, or tool-call function names and
    /// arguments.
    pub text_len: u32,
    /// Tokens in the event when known (per-chunk usage delta or logprobs count).
    pub tokens: Option<u32>,
    /// The text (with `--capture text`) or the raw payload (with `--capture raw`).
    pub text: Option<String>,
}

impl ChunkRecord {
    /// An event of `bytes` on the wire, completed by read `read_index` at `arrival_ns`, before
    /// classification: channel `Other`, no text, no tokens.
    #[inline]
    pub fn unclassified(arrival_ns: u64, read_index: u32, bytes: u32) -> ChunkRecord {
        ChunkRecord {
            arrival_ns,
            read_index,
            bytes,
            channel: Channel::Other,
            text_len: 0,
            tokens: None,
            text: None,
        }
    }

    /// Whether the chunk carried output: non-empty reasoning, content or tool-call text.
    pub fn is_output(&self) -> bool {
        self.channel.is_output_text(self.text_len)
    }
}

/// One request and everything that happened to it: its facts and its chunks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Everything but the chunks.
    #[serde(flatten)]
    pub meta: RequestMeta,
    /// Every streamed event, in arrival order.
    pub chunks: Vec<ChunkRecord>,
}

/// Everything known about one request except its chunks: what a block stores per request, and
/// what every reader of requests (analysis, import, redaction) works with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestMeta {
    /// Unique within the trace; sent as `X-Request-ID`.
    pub id: u64,
    /// Warmup or measured.
    pub phase: Phase,
    /// Trial number within a run (0 when the run has one trial).
    pub trial: u32,
    /// When the schedule meant the request to start.
    pub intended_ns: u64,
    /// When the request was actually handed to the connection.
    pub send_ns: u64,
    /// When the response headers arrived (None if they never did).
    pub headers_ns: Option<u64>,
    /// When the request ended (stream end, error, timeout or cancellation).
    pub end_ns: u64,
    /// HTTP status (0 when no response arrived).
    pub http_status: u16,
    /// How it ended.
    pub outcome: Outcome,
    /// Error text (first KiB of an error body, the I/O error, …), None on success.
    pub error: Option<String>,
    /// Server-reported usage.
    pub usage: Usage,
    /// The last `finish_reason` seen.
    pub finish_reason: Option<String>,
    /// 64-bit hash of the prompt bytes as sent (xxh3).
    pub prompt_hash: u64,
    /// Prompt length in bytes.
    pub prompt_bytes: u32,
    /// 64-bit hash of the concatenated output text (reasoning and content, xxh3).
    pub output_hash: u64,
    /// Output text length in bytes.
    pub output_bytes: u32,
    /// Input tokens the workload planned (None for prompt files without a target).
    pub planned_input_tokens: Option<u32>,
    /// Selected response headers (lower-case name, value), e.g. server timing or request ids.
    pub response_headers: Vec<(String, String)>,
    /// Times the request was sent again on a fresh connection because a reused keep-alive
    /// connection failed before any response byte (0 or 1; format 1.1, 0 in older traces).
    pub retries: u8,
}

/// The run's description, written once after the header as UTF-8 JSON.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// tokentrace version that wrote the file.
    pub tool_version: String,
    /// Command line with secrets removed.
    pub argv: Vec<String>,
    /// Base URL (…/v1).
    pub base_url: String,
    /// `chat` or `completions` (or the importer's source kind).
    pub api: String,
    /// Model name sent.
    pub model: String,
    /// Workload settings (input/output tokens, prompt source, capture, …).
    pub workload: BTreeMap<String, serde_json::Value>,
    /// Load settings (concurrency, rate, arrival, duration, warmup, …).
    pub load: BTreeMap<String, serde_json::Value>,
    /// Seed of every random choice.
    pub seed: u64,
    /// Free-form labels (engine, gpu, tier, serve flags…).
    pub labels: BTreeMap<String, String>,
    /// Wall-clock start (ns since the Unix epoch).
    pub start_realtime_ns: u64,
    /// Anything else a writer wants to keep (import provenance, TLS settings…).
    pub extra: BTreeMap<String, serde_json::Value>,
    /// The header that carried each request's id to the server, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id_header: Option<crate::request_id::RequestIdHeader>,
    /// An imported run: the span its tool divided throughputs by (format 1.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measurement_window: Option<crate::imported::MeasurementWindow>,
    /// An imported run: its tool's own per-request token counts (format 1.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_token_counts: Option<crate::imported::ClientTokenCounts>,
    /// This trace's place in a sharded run (format 1.3; absent for a single-process run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<crate::shards::ShardInfo>,
    /// The shards a merged trace was made of (format 1.3; absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<crate::shards::MergedShards>,
}

/// Facts known only when the run ends, written by `finish()` before the index.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunEnd {
    /// Wall-clock end (ns since the Unix epoch).
    pub end_realtime_ns: u64,
    /// Monotonic end (ns from the anchor).
    pub end_ns: u64,
    /// Why the run stopped (`completed`, `duration`, `interrupted`, `error: …`).
    pub reason: String,
    /// The client's own health during the run (CPU time, peak RSS, scheduling lag, …).
    #[serde(default)]
    pub client_health: ClientHealth,
}

/// What the recording client measured of itself (`getrusage`, its timer, its writer): the
/// facts an analysis needs to tell whether the client disturbed what it measured. Every field
/// is absent when not measured (an imported run); keys this version does not know are kept in
/// `other`, so a trace from a newer writer loses nothing when read and copied.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClientHealth {
    /// CPU time of the recorder during the load (user + system), ns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_ns: Option<u64>,
    /// User-space part of `cpu_ns`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_user_ns: Option<u64>,
    /// Kernel part of `cpu_ns`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_system_ns: Option<u64>,
    /// `cpu_ns / chunks` (None without chunks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_ns_per_chunk: Option<u64>,
    /// Peak resident set size at the end of the run, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rss_bytes: Option<u64>,
    /// Peak resident set size before the load started, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_before_load_bytes: Option<u64>,
    /// Worst oversleep of a ticker on the client's runtime (`tick_ns` apart), ns: how late
    /// the client's runtime could have been sending requests (and, on the hyper client,
    /// reading responses; the stream reader reads on its own thread).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_sched_lag_ns: Option<u64>,
    /// Ticks of that ticker that came more than 2 ms late.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_ticks: Option<u64>,
    /// Ticks of that ticker in all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ticks: Option<u64>,
    /// The ticker's period, ns (absent in traces recorded before it was written: 10 ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tick_ns: Option<u64>,
    /// Times a request's record waited for room in the writer's channel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backpressure_events: Option<u64>,
    /// Chunks recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunks: Option<u64>,
    /// Socket reads that delivered them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reads: Option<u64>,
    /// Wall-clock span of the load, ns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_ns: Option<u64>,
    /// Runtime worker threads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_threads: Option<u64>,
    /// Closed-loop concurrency (None for an open loop).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u64>,
    /// Whether the recorder stopped reusing connections because the server closed them right
    /// after each response (docs/ENGINES.md, llama-server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_closes_after_response: Option<bool>,
    /// Requests of a closed loop whose sending the stream reader began itself, on the
    /// connection the previous response had just left (`--client own` over plain HTTP; one
    /// the socket did not take whole, or whose connection had closed, was finished or sent
    /// again by its task). The others were sent by their tasks on the client's runtime,
    /// which `max_sched_lag_ns` watches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reader_sent_requests: Option<u64>,
    /// Events that their stream's template took whole from the body, without the SSE parser
    /// looking for the line's end first: an event that is exactly one `data:` line and its
    /// blank line, shaped as the stream's last one outside its values (docs/ARCHITECTURE.md).
    /// What is recorded of them is what the parser's path records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events_read_whole: Option<u64>,
    /// Responses of the load whose head came over HTTP/2: hyper's client with `--http 2`, or
    /// with `--http auto` where TLS negotiated h2 by ALPN. The others came over HTTP/1.1
    /// (the own client speaks nothing else).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http2_responses: Option<u64>,
    /// Requests checkpointed but never given a final record when the trace was finished
    /// (format 1.2, section 4.6): readers then chain their checkpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpointed_without_final: Option<u64>,
    /// Keys of other writers or later versions, kept as they were.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

/// What a request still streaming has accumulated since its previous checkpoint (format 1.2):
/// its head as of now and the chunks that arrived since. A reader that finds no final record
/// for the request chains its checkpoints into one [`Outcome::Interrupted`] request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The request as of the checkpoint: `end_ns` is when the checkpoint was taken, `outcome`
    /// is [`Outcome::Interrupted`], and `chunks` holds only the chunks since the previous one.
    pub record: RequestRecord,
    /// Index, in the request's whole chunk list, of `record.chunks[0]` (the number of chunks
    /// earlier checkpoints carried).
    pub chunk_offset: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run end written by 1.1 (every key a JSON value, `concurrency` null in an open loop)
    /// reads into the typed fields; keys this version does not know survive a round trip.
    #[test]
    fn client_health_reads_earlier_run_ends_and_keeps_unknown_keys() {
        let json = r#"{"end_realtime_ns":1,"end_ns":2,"reason":"completed","client_health":
            {"cpu_ns":30,"max_sched_lag_ns":20000000,"concurrency":null,
             "server_closes_after_response":true,"gpu_watts":312.5}}"#;
        let end: RunEnd = serde_json::from_str(json).unwrap();
        let h = &end.client_health;
        assert_eq!(h.cpu_ns, Some(30));
        assert_eq!(h.max_sched_lag_ns, Some(20_000_000));
        assert_eq!(h.concurrency, None);
        assert_eq!(h.server_closes_after_response, Some(true));
        assert_eq!(h.other["gpu_watts"], 312.5);
        let back: RunEnd = serde_json::from_str(&serde_json::to_string(&end).unwrap()).unwrap();
        assert_eq!(back, end);
        // A run end without the object at all (an importer's) is an empty health report.
        let bare: RunEnd =
            serde_json::from_str(r#"{"end_realtime_ns":1,"end_ns":2,"reason":"x"}"#).unwrap();
        assert_eq!(bare.client_health, ClientHealth::default());
    }
}
