//! The simulator's configuration: every engine and fault parameter, as command-line flags and
//! as a plain struct that code can build (`SimConfig::default()` plus field updates).

use std::path::PathBuf;

/// Name of the JSON field that carries reasoning deltas in chat responses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Default)]
pub enum ReasoningField {
    /// `reasoning_content` (vLLM, SGLang, DeepSeek).
    #[default]
    #[value(name = "reasoning_content")]
    ReasoningContent,
    /// `reasoning` (newer vLLM releases, OpenRouter).
    #[value(name = "reasoning")]
    Reasoning,
}

impl ReasoningField {
    /// The JSON key as it appears in a delta.
    pub fn key(self) -> &'static str {
        match self {
            ReasoningField::ReasoningContent => "reasoning_content",
            ReasoningField::Reasoning => "reasoning",
        }
    }
}

/// Engine model and server settings. Times are in milliseconds unless the name says otherwise.
#[derive(Clone, Debug, clap::Args)]
pub struct SimConfig {
    /// Model name served by `/v1/models` (requests may name any model; it is echoed back).
    #[arg(long, default_value = "tokentrace-sim")]
    pub model: String,
    /// Batch slots: sequences decoded together. Requests beyond them wait in a FIFO queue.
    #[arg(long, default_value_t = 64)]
    pub slots: usize,
    /// Prefill speed in prompt tokens per second. Prefills run one after another, so TTFT
    /// grows with prompt length and with the number of requests admitted before.
    #[arg(long, default_value_t = 10_000.0)]
    pub prefill_tok_s: f64,
    /// Fixed cost of each prefill, in ms.
    #[arg(long, default_value_t = 2.0)]
    pub prefill_base_ms: f64,
    /// Decode step time with an empty batch, in ms.
    #[arg(long, default_value_t = 10.0)]
    pub step_base_ms: f64,
    /// Extra decode step time per active sequence, in ms.
    #[arg(long, default_value_t = 0.05)]
    pub step_per_seq_ms: f64,
    /// Speculative decoding: mean tokens produced per decode step (1 = off).
    #[arg(long, default_value_t = 1.0)]
    pub spec_tokens_mean: f64,
    /// Speculative decoding: draft tokens per step; a step yields 1 to this + 1 tokens.
    #[arg(long, default_value_t = 3)]
    pub spec_draft_tokens: u32,
    /// Reasoning tokens streamed before the content of every chat response (0 = no reasoning).
    #[arg(long, default_value_t = 0)]
    pub reasoning_tokens: u32,
    /// JSON field name of reasoning deltas.
    #[arg(long, value_enum, default_value_t = ReasoningField::ReasoningContent)]
    pub reasoning_field: ReasoningField,
    /// Mean content length before the end-of-sequence token (unless `ignore_eos`).
    #[arg(long, default_value_t = 200)]
    pub eos_tokens_mean: u32,
    /// Relative spread of the content length: drawn uniformly in mean * (1 +- spread).
    #[arg(long, default_value_t = 0.5)]
    pub eos_tokens_spread: f64,
    /// `max_tokens` applied when a request gives none.
    #[arg(long, default_value_t = 4096)]
    pub default_max_tokens: u32,
    /// Chat template overhead: prompt tokens added per chat message.
    #[arg(long, default_value_t = 0)]
    pub chat_tokens_per_message: u32,
    /// Prefix cache: prompts sharing leading blocks with earlier prompts report cached tokens
    /// and skip their prefill.
    #[arg(long)]
    pub prefix_cache: bool,
    /// Prefix cache block size in tokens.
    #[arg(long, default_value_t = 16)]
    pub prefix_cache_block: u32,
    /// Seed of every random draw (output lengths, text, speculative steps, faults).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Write one JSON line per SSE event written: request_id, chunk_index, mono_ns.
    #[arg(long)]
    pub truth_log: Option<PathBuf>,
    /// Refuse an X-Request-ID that is not a UUID with HTTP 400 and an empty body, as
    /// llama-cpp-python's server does.
    #[arg(long)]
    pub uuid_request_ids: bool,
    /// Serve TLS with this certificate chain (PEM); needs --tls-key. Engines behind TLS
    /// (gateways, hosted APIs) are streamed from this way, and the benchmark measures the
    /// recorder's TLS read path against it.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Fault injection.
    #[command(flatten)]
    pub faults: FaultConfig,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            model: "tokentrace-sim".to_string(),
            slots: 64,
            prefill_tok_s: 10_000.0,
            prefill_base_ms: 2.0,
            step_base_ms: 10.0,
            step_per_seq_ms: 0.05,
            spec_tokens_mean: 1.0,
            spec_draft_tokens: 3,
            reasoning_tokens: 0,
            reasoning_field: ReasoningField::ReasoningContent,
            eos_tokens_mean: 200,
            eos_tokens_spread: 0.5,
            default_max_tokens: 4096,
            chat_tokens_per_message: 0,
            prefix_cache: false,
            prefix_cache_block: 16,
            seed: 0,
            truth_log: None,
            uuid_request_ids: false,
            tls_cert: None,
            tls_key: None,
            faults: FaultConfig::default(),
        }
    }
}

/// Fault injection. Each fault has a probability per request (`--fault-X P`) and a schedule
/// (`--fault-X-every N`: requests N, 2N, 3N… in arrival order, counted from 1). A request gets
/// the fault when either fires. HTTP errors are answered at once (429 before 500 before 503);
/// the stream faults strike after `--fault-after-chunks` token events, can combine, and apply
/// to streaming responses only.
#[derive(Clone, Debug, clap::Args)]
pub struct FaultConfig {
    /// Probability of answering HTTP 429 (with `retry-after: 1`).
    #[arg(long = "fault-429", default_value_t = 0.0)]
    pub http_429: f64,
    /// Answer HTTP 429 to every Nth request (0 = never).
    #[arg(long = "fault-429-every", default_value_t = 0)]
    pub http_429_every: u64,
    /// Probability of answering HTTP 500.
    #[arg(long = "fault-500", default_value_t = 0.0)]
    pub http_500: f64,
    /// Answer HTTP 500 to every Nth request.
    #[arg(long = "fault-500-every", default_value_t = 0)]
    pub http_500_every: u64,
    /// Probability of answering HTTP 503.
    #[arg(long = "fault-503", default_value_t = 0.0)]
    pub http_503: f64,
    /// Answer HTTP 503 to every Nth request.
    #[arg(long = "fault-503-every", default_value_t = 0)]
    pub http_503_every: u64,
    /// Probability of resetting the connection (TCP RST) mid-stream.
    #[arg(long = "fault-reset", default_value_t = 0.0)]
    pub reset: f64,
    /// Reset every Nth request's connection mid-stream.
    #[arg(long = "fault-reset-every", default_value_t = 0)]
    pub reset_every: u64,
    /// Probability of a mid-stream stall: no bytes for `--fault-stall-ms`, then the events the
    /// engine produced meanwhile arrive together (a network stall; decoding goes on).
    #[arg(long = "fault-stall", default_value_t = 0.0)]
    pub stall: f64,
    /// Stall every Nth request.
    #[arg(long = "fault-stall-every", default_value_t = 0)]
    pub stall_every: u64,
    /// Length of a stall in ms.
    #[arg(long = "fault-stall-ms", default_value_t = 2000)]
    pub stall_ms: u64,
    /// Probability of an extra SSE event whose JSON is malformed.
    #[arg(long = "fault-malformed", default_value_t = 0.0)]
    pub malformed: f64,
    /// Malformed event in every Nth request.
    #[arg(long = "fault-malformed-every", default_value_t = 0)]
    pub malformed_every: u64,
    /// Probability of an extra, oversize SSE event (one line of `--fault-oversize-bytes`).
    #[arg(long = "fault-oversize", default_value_t = 0.0)]
    pub oversize: f64,
    /// Oversize event in every Nth request.
    #[arg(long = "fault-oversize-every", default_value_t = 0)]
    pub oversize_every: u64,
    /// Size of the oversize event's line in bytes.
    #[arg(long = "fault-oversize-bytes", default_value_t = 1 << 20)]
    pub oversize_bytes: usize,
    /// Probability of ending the stream without `data: [DONE]`.
    #[arg(long = "fault-no-done", default_value_t = 0.0)]
    pub no_done: f64,
    /// Omit `[DONE]` from every Nth request.
    #[arg(long = "fault-no-done-every", default_value_t = 0)]
    pub no_done_every: u64,
    /// Probability of omitting the usage chunk even when it was asked for.
    #[arg(long = "fault-no-usage", default_value_t = 0.0)]
    pub no_usage: f64,
    /// Omit usage from every Nth request.
    #[arg(long = "fault-no-usage-every", default_value_t = 0)]
    pub no_usage_every: u64,
    /// Probability of an extra event carrying bytes that are not UTF-8 (0xFF 0xFE).
    #[arg(long = "fault-non-utf8", default_value_t = 0.0)]
    pub non_utf8: f64,
    /// Non-UTF-8 event in every Nth request.
    #[arg(long = "fault-non-utf8-every", default_value_t = 0)]
    pub non_utf8_every: u64,
    /// Stream faults strike after this many token events (or at the last one, if fewer); 0
    /// strikes before the first token event, right after the role event.
    #[arg(long = "fault-after-chunks", default_value_t = 2)]
    pub after_chunks: u32,
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig {
            http_429: 0.0,
            http_429_every: 0,
            http_500: 0.0,
            http_500_every: 0,
            http_503: 0.0,
            http_503_every: 0,
            reset: 0.0,
            reset_every: 0,
            stall: 0.0,
            stall_every: 0,
            stall_ms: 2000,
            malformed: 0.0,
            malformed_every: 0,
            oversize: 0.0,
            oversize_every: 0,
            oversize_bytes: 1 << 20,
            no_done: 0.0,
            no_done_every: 0,
            no_usage: 0.0,
            no_usage_every: 0,
            non_utf8: 0.0,
            non_utf8_every: 0,
            after_chunks: 2,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        config: SimConfig,
    }

    /// The flag defaults and `Default` must agree, or code-built and CLI-built servers differ.
    #[test]
    fn flag_defaults_match_default_impl() {
        let parsed = Cli::parse_from(["sim"]).config;
        assert_eq!(format!("{parsed:?}"), format!("{:?}", SimConfig::default()));
    }

    #[test]
    fn fault_flags_parse() {
        let parsed = Cli::parse_from([
            "sim",
            "--fault-429",
            "0.5",
            "--fault-reset-every",
            "3",
            "--reasoning-field",
            "reasoning",
        ])
        .config;
        assert_eq!(parsed.faults.http_429, 0.5);
        assert_eq!(parsed.faults.reset_every, 3);
        assert_eq!(parsed.reasoning_field.key(), "reasoning");
    }
}
