//! One trial's metric block, under AIPerf 0.10's definitions (the capacity fixture's version),
//! read from the built-in `aiperf-0.10` protocol ([`crate::definitions`]).
//!
//! Per successful measured request, with times from the request's send, evaluated on the
//! analyzer's per-request facts with the protocol's request filter, chunk rules, token sources
//! and its `time_to_first_token`, `request_latency` and `inter_token_latency` quantities:
//! - TTFT: the first non-empty reasoning or content delta;
//! - request latency: the last non-empty reasoning or content delta (not the usage event or
//!   `[DONE]` that may follow);
//! - output sequence length: the server's `usage.completion_tokens` (AIPerf 0.10's
//!   `server_token_count`), else the number of non-empty output deltas;
//! - ITL: (latency - TTFT) / (OSL - 1), for OSL > 1; per-user throughput: 1 / ITL.
//!
//! The statistics each metric reports and how they are taken (numpy-linear percentiles,
//! running-sum mean) are the protocol's. Three rules of AIPerf's arithmetic are not protocol
//! data, so they are here, and on the protocol's page in docs/PROTOCOLS.md:
//! - statistics of time metrics are taken on ns values, then multiplied by 1e-6 for ms, as
//!   AIPerf keeps ns and converts only its results (bit-exact with its exports);
//! - a negative time (impossible on one monotonic clock) is clamped to 0;
//! - the benchmark duration runs from the first send to the last output of a successful
//!   measured request (AIPerf's `max(start + request_latency) - min(start)`), and output
//!   throughput = total OSL / duration, request throughput = successful requests / duration
//!   (AIPerf 0.10 divides by the benchmark duration); per-user throughput is
//!   `1 / (ITL ns * 1e-9)`.

use crate::definitions::{AiperfDefinitions, ITL, PER_USER_TPS, REQUEST_LATENCY, TTFT};
use crate::error::CapacityError;
use serde_json::{json, Map, Value};
use tokentrace_analyzer::facts::summarize_record;
use tokentrace_analyzer::protocol::{Count, Quantity};
use tokentrace_analyzer::quantity;
use tokentrace_format::RequestRecord;

/// Smallest and largest of a set of token counts.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MinMax {
    /// Smallest value seen.
    pub min: Option<f64>,
    /// Largest value seen.
    pub max: Option<f64>,
}

impl MinMax {
    /// Adds one value.
    pub fn add(&mut self, value: f64) {
        self.min = Some(self.min.map_or(value, |m| m.min(value)));
        self.max = Some(self.max.map_or(value, |m| m.max(value)));
    }

    /// Merges another range into this one.
    pub fn merge(&mut self, other: MinMax) {
        if let Some(v) = other.min {
            self.add(v);
        }
        if let Some(v) = other.max {
            self.add(v);
        }
    }

    /// `{"min": .., "max": ..}` with floats, as the fixture prints them (`2099.0`).
    pub fn to_json(self) -> Value {
        json!({ "min": self.min, "max": self.max })
    }
}

/// The per-request values and trial totals of one trial.
#[derive(Debug, Clone, PartialEq)]
pub struct TrialMetrics {
    /// The definitions the values were computed under (their statistics are taken under them).
    pub definitions: &'static AiperfDefinitions,
    /// TTFT per successful request, ns (AIPerf keeps native units and converts statistics).
    pub ttft_ns: Vec<f64>,
    /// Request latency per successful request, ns.
    pub request_latency_ns: Vec<f64>,
    /// ITL per successful request with OSL > 1, ns.
    pub itl_ns: Vec<f64>,
    /// Output tokens per second per user: 1 / (ITL ns * 1e-9).
    pub per_user_tps: Vec<f64>,
    /// Sum of output sequence lengths.
    pub output_tokens: u64,
    /// Successful measured requests.
    pub requests: u64,
    /// First send to last output among the successful measured requests, seconds.
    pub duration_s: f64,
    /// Server-reported prompt tokens.
    pub server_prompt_tokens: MinMax,
    /// Server-reported completion tokens.
    pub server_completion_tokens: MinMax,
}

/// The `aiperf-0.10` metrics a trial keeps per-request values of (see
/// [`TrialMetrics::values_of`]).
pub const KEPT_METRICS: [&str; 4] = [TTFT, REQUEST_LATENCY, ITL, PER_USER_TPS];

/// AIPerf converts ns statistics to ms by multiplying (bit-exact with its exports).
pub const NS_TO_MS: f64 = 1e-6;

impl TrialMetrics {
    /// Computes the metrics of the measured requests among `records`; fails only when the
    /// built-in `aiperf-0.10` protocol lacks a definition the block needs.
    pub fn from_records(records: &[RequestRecord]) -> Result<TrialMetrics, CapacityError> {
        let definitions = AiperfDefinitions::builtin()?;
        let mut m = TrialMetrics::empty(definitions);
        let mut window: Option<(u64, u64)> = None;
        for record in records.iter().filter(|r| definitions.counts(r)) {
            if let Some(last_output_ns) = m.add_request(definitions, record) {
                let (start, end) = window.unwrap_or((record.send_ns, last_output_ns));
                window = Some((start.min(record.send_ns), end.max(last_output_ns)));
            }
        }
        if let Some((start, end)) = window {
            m.duration_s = end.saturating_sub(start) as f64 * 1e-9;
        }
        Ok(m)
    }

    /// No request yet.
    fn empty(definitions: &'static AiperfDefinitions) -> TrialMetrics {
        TrialMetrics {
            definitions,
            ttft_ns: Vec::new(),
            request_latency_ns: Vec::new(),
            itl_ns: Vec::new(),
            per_user_tps: Vec::new(),
            output_tokens: 0,
            requests: 0,
            duration_s: 0.0,
            server_prompt_tokens: MinMax::default(),
            server_completion_tokens: MinMax::default(),
        }
    }

    /// Adds one request; returns the arrival of its last output, None when it had none.
    fn add_request(&mut self, defs: &AiperfDefinitions, record: &RequestRecord) -> Option<u64> {
        let facts = summarize_record(0, record, defs.rules, None);
        let last = facts.last_output_ns?;
        let sources = &defs.token_sources;
        let osl = quantity::count(&facts, Count::OutputTokens, sources)?;
        // A time before the send cannot happen on one monotonic clock (AIPerf's metrics raise
        // on one); clamped to 0, the request stays measured.
        let ns = |q: &Quantity| quantity::value_ns(&facts, q, sources).map(|v| v.max(0.0));
        let ttft = ns(&defs.ttft)?;
        let latency = ns(&defs.request_latency)?;
        self.requests += 1;
        self.output_tokens += osl;
        self.ttft_ns.push(ttft);
        self.request_latency_ns.push(latency);
        if let Some(itl) = ns(&defs.itl) {
            self.itl_ns.push(itl);
            if itl > 0.0 {
                self.per_user_tps.push(1.0 / (itl * 1e-9));
            }
        }
        if let Some(p) = record.usage.prompt_tokens {
            self.server_prompt_tokens.add(f64::from(p));
        }
        if let Some(c) = record.usage.completion_tokens {
            self.server_completion_tokens.add(f64::from(c));
        }
        Some(last)
    }

    /// The per-request values of the protocol metric `name` and the factor that turns a
    /// statistic of them into the metric's unit (ms for times); None for a metric the block
    /// keeps no values of.
    pub fn values_of(&self, name: &str) -> Option<(&[f64], f64)> {
        Some(match name {
            TTFT => (&self.ttft_ns, NS_TO_MS),
            ITL => (&self.itl_ns, NS_TO_MS),
            REQUEST_LATENCY => (&self.request_latency_ns, NS_TO_MS),
            PER_USER_TPS => (&self.per_user_tps, 1.0),
            _ => return None,
        })
    }

    /// The protocol's statistics of metric `name`, under their keys, scaled to its unit.
    fn statistics_json(&self, name: &str) -> Value {
        let defs = self.definitions;
        let (values, scale) = self.values_of(name).unwrap_or((&[], 1.0));
        let reported = defs.reported(name);
        let wanted: Vec<_> = reported.iter().map(|&(_, stat)| stat).collect();
        let block: Map<String, Value> = reported
            .into_iter()
            .map(|(key, _)| key)
            .zip(defs.statistics(values, &wanted))
            .map(|(key, v)| (key, json!(v.map(|v| v * scale))))
            .collect();
        Value::Object(block)
    }

    fn per_second(&self, count: f64) -> Option<f64> {
        (self.duration_s > 0.0).then(|| count / self.duration_s)
    }

    /// The fixture's per-trial metric keys, in its order (correctness and trial are added by
    /// the report).
    pub fn to_json(&self) -> Map<String, Value> {
        let mut block = Map::new();
        block.insert("ttft_ms".into(), self.statistics_json(TTFT));
        block.insert(
            "request_latency_ms".into(),
            self.statistics_json(REQUEST_LATENCY),
        );
        block.insert("itl_ms".into(), self.statistics_json(ITL));
        block.insert(
            "output_throughput_tps".into(),
            json!(self.per_second(self.output_tokens as f64)),
        );
        block.insert(
            "per_user_output_throughput_tps".into(),
            self.statistics_json(PER_USER_TPS),
        );
        block.insert(
            "request_throughput_rps".into(),
            json!(self.per_second(self.requests as f64)),
        );
        block.insert("benchmark_duration_s".into(), json!(self.duration_s));
        block.insert(
            "server_prompt_tokens".into(),
            self.server_prompt_tokens.to_json(),
        );
        block.insert(
            "server_completion_tokens".into(),
            self.server_completion_tokens.to_json(),
        );
        block
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use tokentrace_format::{Channel, ChunkRecord, Outcome, Phase, Usage};

    /// A successful record: sent at `send`, output chunks at `arrivals` (ms from send), then a
    /// usage event and `[DONE]`, with the given usage.
    pub(crate) fn record(
        id: u64,
        phase: Phase,
        send_ms: u64,
        arrivals_ms: &[u64],
        completion_tokens: u32,
    ) -> RequestRecord {
        let ms = 1_000_000u64;
        let send_ns = send_ms * ms;
        let mut chunks = vec![chunk(send_ns + ms / 2, Channel::Role, 0)];
        for &a in arrivals_ms {
            chunks.push(chunk(send_ns + a * ms, Channel::Content, 4));
        }
        let last = arrivals_ms.last().copied().unwrap_or(0);
        chunks.push(chunk(send_ns + (last + 1) * ms, Channel::Usage, 0));
        chunks.push(chunk(send_ns + (last + 2) * ms, Channel::Done, 0));
        RequestRecord {
            id,
            phase,
            trial: 0,
            intended_ns: send_ns,
            send_ns,
            headers_ns: Some(send_ns + ms / 4),
            end_ns: send_ns + (last + 2) * ms,
            http_status: 200,
            outcome: Outcome::Ok,
            error: None,
            usage: Usage {
                prompt_tokens: Some(100 + id as u32 % 3),
                completion_tokens: Some(completion_tokens),
                reasoning_tokens: None,
                cached_tokens: None,
            },
            finish_reason: Some("length".into()),
            prompt_hash: 1000 + id,
            prompt_bytes: 400,
            output_hash: 5000 + id,
            output_bytes: 4 * arrivals_ms.len() as u32,
            planned_input_tokens: Some(100),
            response_headers: Vec::new(),
            chunks,
            retries: 0,
        }
    }

    fn chunk(arrival_ns: u64, channel: Channel, text_len: u32) -> ChunkRecord {
        ChunkRecord {
            arrival_ns,
            read_index: 0,
            bytes: 40 + text_len,
            channel,
            text_len,
            tokens: None,
            text: None,
        }
    }

    #[test]
    fn aiperf_definitions_per_request_and_per_trial() {
        let records = vec![
            // Warmup: ignored by metrics.
            record(0, Phase::Warmup, 0, &[500, 600], 2),
            // TTFT 100 ms, last output 400 ms, 4 tokens: ITL 100 ms, 10 tok/s per user.
            record(1, Phase::Measured, 1000, &[100, 200, 300, 400], 4),
            // TTFT 300 ms, last output 500 ms, 5 tokens: ITL 50 ms.
            record(2, Phase::Measured, 1500, &[300, 500], 5),
        ];
        let m = TrialMetrics::from_records(&records).unwrap();
        assert_eq!(m.ttft_ns, vec![100e6, 300e6]);
        assert_eq!(m.request_latency_ns, vec![400e6, 500e6]);
        assert_eq!(m.itl_ns, vec![100e6, 50e6]);
        assert_eq!(m.per_user_tps, vec![10.0, 20.0]);
        assert_eq!(m.output_tokens, 9);
        assert_eq!(m.requests, 2);
        // First send 1000 ms, last output 1500 + 500 ms.
        assert!((m.duration_s - 1.0).abs() < 1e-12);
        assert_eq!(m.server_prompt_tokens.min, Some(101.0));
        assert_eq!(m.server_prompt_tokens.max, Some(102.0));
        let block = Value::Object(m.to_json());
        assert_eq!(block["ttft_ms"]["p50"], json!(200.0));
        assert_eq!(block["per_user_output_throughput_tps"]["avg"], json!(15.0));
        assert_eq!(
            block["server_completion_tokens"],
            json!({"min": 4.0, "max": 5.0})
        );
        let rps = block["request_throughput_rps"].as_f64().unwrap();
        assert!((rps - 2.0).abs() < 1e-12);
    }

    #[test]
    fn failed_requests_are_not_measured_and_empty_trials_have_nulls() {
        let mut failed = record(1, Phase::Measured, 0, &[100], 1);
        failed.outcome = Outcome::HttpError;
        failed.http_status = 503;
        let m = TrialMetrics::from_records(&[failed]).unwrap();
        assert_eq!(m.requests, 0);
        let block = Value::Object(m.to_json());
        assert_eq!(block["ttft_ms"]["p95"], Value::Null);
        let m = TrialMetrics::from_records(&[]).unwrap();
        assert_eq!(
            Value::Object(m.to_json())["output_throughput_tps"],
            Value::Null
        );
    }

    #[test]
    fn tool_call_streams_and_streams_without_done_are_measured() {
        // A stream of tool-call deltas only (AIPerf: ToolCallResponseData, content
        // responses), and a complete answer that ended without [DONE].
        let mut tools = record(1, Phase::Measured, 0, &[100, 200, 300], 3);
        for chunk in tools
            .chunks
            .iter_mut()
            .filter(|c| c.channel == Channel::Content)
        {
            chunk.channel = Channel::Tool;
        }
        let mut no_done = record(2, Phase::Measured, 1000, &[100, 200, 300], 3);
        no_done.outcome = Outcome::MissingDone;
        no_done.chunks.retain(|c| c.channel != Channel::Done);
        let m = TrialMetrics::from_records(&[tools, no_done]).unwrap();
        assert_eq!(m.requests, 2);
        assert_eq!(m.ttft_ns, vec![100e6, 100e6]);
        assert_eq!(m.request_latency_ns, vec![300e6, 300e6]);
        assert_eq!(m.itl_ns, vec![100e6, 100e6]);
    }

    #[test]
    fn without_usage_osl_is_the_output_delta_count() {
        // Three output deltas, no usage: OSL 3, ITL (300 - 100) / 2 ms.
        let mut r = record(1, Phase::Measured, 0, &[100, 200, 300], 0);
        r.usage.completion_tokens = None;
        let m = TrialMetrics::from_records(&[r]).unwrap();
        assert_eq!(m.output_tokens, 3);
        assert_eq!(m.itl_ns, vec![100e6]);
        assert_eq!(m.server_completion_tokens, MinMax::default());
    }
}
