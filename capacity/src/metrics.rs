//! One trial's metric block, under AIPerf 0.10's definitions (the capacity fixture's version),
//! read from the built-in `aiperf-0.10` protocol ([`crate::definitions`]).
//!
//! Per successful measured request, with times from the request's send, evaluated on the
//! analyzer's per-request facts with the protocol's request filter, chunk rules, token sources
//! and its `time_to_first_token`, `request_latency`, `inter_token_latency` and
//! `output_token_throughput_per_user` quantities:
//! - TTFT: the first non-empty reasoning or content delta;
//! - request latency: the last non-empty reasoning or content delta (not the usage event or
//!   `[DONE]` that may follow);
//! - output sequence length: the server's `usage.completion_tokens` (AIPerf 0.10's
//!   `server_token_count`), else the number of non-empty output deltas;
//! - ITL: (latency - TTFT) / (OSL - 1), for OSL > 1; per-user throughput: 1 / ITL in seconds.
//!
//! AIPerf's arithmetic is the protocol's too, each rule an option the analyzer honours
//! (documented on the protocol's page in docs/PROTOCOLS.md): statistics of times taken of their
//! ns values and converted after (`time_statistics`), negative times clamped to 0
//! (`negative_times`), the benchmark duration from the first send to the last output of a
//! measured request (`wall_clock`; output and request throughput divide by it, as AIPerf 0.10
//! does) and per-user throughput as the reciprocal of ITL in seconds (the rate's `form`). The
//! values are evaluated and summarized with the analyzer's own functions, so the block equals
//! what `tokentrace analyze --protocol aiperf-0.10` reports for the same requests.

use crate::definitions::{AiperfDefinitions, ITL, PER_USER_TPS, REQUEST_LATENCY, TTFT};
use crate::error::CapacityError;
use serde_json::{json, Map, Value};
use tokentrace_analyzer::facts::{summarize_record, RequestFacts};
use tokentrace_analyzer::protocol::{Count, Quantity, Stat, WallClockRequests};
use tokentrace_analyzer::quantity;
use tokentrace_analyzer::summary::RunContext;
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
    /// TTFT per successful request, in the unit its statistics are taken in: ns, as
    /// `aiperf-0.10` takes the statistics of times (AIPerf keeps ns and converts statistics).
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
    /// The protocol's wall clock (first send to last output among the successful measured
    /// requests), seconds; 0 when no request spans it.
    pub duration_s: f64,
    /// Server-reported prompt tokens.
    pub server_prompt_tokens: MinMax,
    /// Server-reported completion tokens.
    pub server_completion_tokens: MinMax,
}

/// The `aiperf-0.10` metrics a trial keeps per-request values of (see
/// [`TrialMetrics::values_of`]).
pub const KEPT_METRICS: [&str; 4] = [TTFT, REQUEST_LATENCY, ITL, PER_USER_TPS];

impl TrialMetrics {
    /// Computes the metrics of the measured requests among `records`; fails only when the
    /// built-in `aiperf-0.10` protocol lacks a definition the block needs.
    pub fn from_records(records: &[RequestRecord]) -> Result<TrialMetrics, CapacityError> {
        let definitions = AiperfDefinitions::builtin()?;
        let mut m = TrialMetrics::empty(definitions);
        let clock = &definitions.wall_clock;
        let mut window: Option<(u64, u64)> = None;
        for record in records {
            let counted = definitions.counts(record);
            // The analyzer's wall clock spans failed requests of the counted phases too,
            // unless the protocol spans only the counted ones.
            let spanned = counted
                || (clock.requests == WallClockRequests::All
                    && definitions.requests.phases.contains(&record.meta.phase));
            if !spanned {
                continue;
            }
            let facts = summarize_record(0, record, definitions.rules, None);
            if counted {
                m.add_request(definitions, &facts, record);
            }
            if let Some((from, to)) = quantity::span_ns(&facts, clock) {
                let (start, end) = window.unwrap_or((from, to));
                window = Some((start.min(from), end.max(to)));
            }
        }
        // The block is one trial's records, with no imported window to prefer.
        let wall_clock_ns = window.map(|(start, end)| end.saturating_sub(start));
        let run = RunContext {
            wall_clock_ns,
            wall_clock_ms: wall_clock_ns.map(|ns| ns as f64 / 1e6),
            ..RunContext::default()
        };
        m.duration_s = run
            .span_s(definitions.protocol.time_statistics)
            .unwrap_or(0.0);
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

    /// Adds one counted request; a request without a TTFT or a request latency (no output)
    /// is not measured.
    fn add_request(
        &mut self,
        defs: &AiperfDefinitions,
        facts: &RequestFacts,
        record: &RequestRecord,
    ) {
        let cx = defs.context();
        // The value a statistic is taken of: ns for a time taken in ns, else the value in the
        // metric's unit (as the analyzer's summary does).
        let value = |metric: &str, q: &Quantity| match defs.scale_of(metric) {
            Some(_) => quantity::value_ns(facts, q, &cx),
            None => quantity::value(facts, q, &cx),
        };
        let (Some(ttft), Some(latency)) = (
            value(TTFT, &defs.ttft),
            value(REQUEST_LATENCY, &defs.request_latency),
        ) else {
            return;
        };
        let Some(osl) = quantity::count(facts, Count::OutputTokens, cx.sources) else {
            return;
        };
        self.requests += 1;
        self.output_tokens += osl;
        self.ttft_ns.push(ttft);
        self.request_latency_ns.push(latency);
        self.itl_ns.extend(value(ITL, &defs.itl));
        self.per_user_tps
            .extend(value(PER_USER_TPS, &defs.per_user_tps));
        if let Some(p) = record.meta.usage.prompt_tokens {
            self.server_prompt_tokens.add(f64::from(p));
        }
        if let Some(c) = record.meta.usage.completion_tokens {
            self.server_completion_tokens.add(f64::from(c));
        }
    }

    /// The per-request values of the protocol metric `name`, in the unit its statistics are
    /// taken in ([`AiperfDefinitions::statistics`] brings them to the metric's); None for a
    /// metric the block keeps no values of.
    pub fn values_of(&self, name: &str) -> Option<&[f64]> {
        Some(match name {
            TTFT => &self.ttft_ns,
            ITL => &self.itl_ns,
            REQUEST_LATENCY => &self.request_latency_ns,
            PER_USER_TPS => &self.per_user_tps,
            _ => return None,
        })
    }

    /// `wanted` statistics of metric `name` in its unit; None for each when the block keeps
    /// no values of it.
    pub fn statistics(&self, name: &str, wanted: &[Stat]) -> Vec<Option<f64>> {
        let values = self.values_of(name).unwrap_or(&[]);
        self.definitions.statistics(name, values, wanted)
    }

    /// The protocol's statistics of metric `name`, under their keys, in its unit.
    fn statistics_json(&self, name: &str) -> Value {
        let reported = self.definitions.reported(name);
        let wanted: Vec<_> = reported.iter().map(|&(_, stat)| stat).collect();
        let block: Map<String, Value> = reported
            .into_iter()
            .map(|(key, _)| key)
            .zip(self.statistics(name, &wanted))
            .map(|(key, v)| (key, json!(v)))
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
    use tokentrace_format::{Channel, ChunkRecord, Outcome, Phase, RequestMeta, Usage};

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
            meta: RequestMeta {
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
                retries: 0,
            },
            chunks,
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
        failed.meta.outcome = Outcome::HttpError;
        failed.meta.http_status = 503;
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
        no_done.meta.outcome = Outcome::MissingDone;
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
        r.meta.usage.completion_tokens = None;
        let m = TrialMetrics::from_records(&[r]).unwrap();
        assert_eq!(m.output_tokens, 3);
        assert_eq!(m.itl_ns, vec![100e6]);
        assert_eq!(m.server_completion_tokens, MinMax::default());
    }

    #[test]
    fn a_negative_time_is_zero_and_the_window_ends_at_the_last_output() {
        // The first output stamped 1 µs before the send (`negative_times = "clamp"`): TTFT 0,
        // the request still measured; ITL from it to the last output at 200 ms.
        let mut early = record(1, Phase::Measured, 1000, &[100, 200], 2);
        let send_ns = early.meta.send_ns;
        if let Some(first) = early
            .chunks
            .iter_mut()
            .find(|c| c.channel == Channel::Content)
        {
            first.arrival_ns = send_ns - 1_000;
        }
        // A failed request of the same phase ends later, outside the window.
        let mut failed = record(2, Phase::Measured, 1100, &[500], 1);
        failed.meta.outcome = Outcome::HttpError;
        let m = TrialMetrics::from_records(&[early, failed]).unwrap();
        assert_eq!(m.ttft_ns, vec![0.0]);
        assert_eq!(m.itl_ns, vec![200e6 + 1e3]);
        assert_eq!(m.per_user_tps, vec![1.0 / ((200e6 + 1e3) * 1e-9)]);
        // `wall_clock`: first send (1000 ms) to the last output (1200 ms) of the measured one.
        assert_eq!(m.duration_s, 200e6 * 1e-9);
    }
}
