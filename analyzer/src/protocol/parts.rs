//! The parts protocols are built from. Each is data; what it means is in its doc comment and
//! in the sentence [`crate::methodology`] writes for it.

use serde::{Deserialize, Serialize};
use tokentrace_format::{Outcome, Phase};

/// A point in a request's life that times are measured from or to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Anchor {
    /// When the schedule meant the request to start (coordinated-omission corrected).
    Intended,
    /// When the request was handed to the connection.
    Send,
    /// When the response headers arrived.
    Headers,
    /// The first non-empty reasoning delta.
    FirstReasoning,
    /// The first non-empty content delta.
    FirstContent,
    /// The first non-empty reasoning or content delta.
    FirstOutput,
    /// The second non-empty reasoning or content delta.
    SecondOutput,
    /// The last non-empty content delta.
    LastContent,
    /// The last non-empty reasoning or content delta.
    LastOutput,
    /// The first event carrying a choice (a role-only delta counts).
    FirstChoice,
    /// The last event carrying a choice (usage-only events and `[DONE]` do not).
    LastChoice,
    /// The end of the stream (or of the request, when it failed).
    End,
}

/// Where a request's output token count comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenSource {
    /// `usage.completion_tokens` reported by the server.
    Usage,
    /// The sum of per-chunk token counts (per-chunk usage or logprobs), when every output
    /// chunk has one.
    ChunkTokens,
    /// One token per non-empty output chunk.
    Chunks,
    /// The count a client tokenizer made (an imported run's own counts, e.g. AIPerf's OSL,
    /// kept in `manifest.client_token_counts`).
    ClientCount,
}

impl TokenSource {
    /// The name reported per request (`output_token_source`).
    pub fn name(self) -> &'static str {
        match self {
            TokenSource::Usage => "usage",
            TokenSource::ChunkTokens => "chunk_usage",
            TokenSource::Chunks => "chunks",
            TokenSource::ClientCount => "client_tokenizer",
        }
    }
}

/// A per-request count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Count {
    /// Output tokens, from the protocol's token sources.
    OutputTokens,
    /// `usage.prompt_tokens`.
    PromptTokens,
    /// `usage.prompt_tokens_details.cached_tokens`.
    CachedTokens,
    /// `usage.completion_tokens_details.reasoning_tokens`.
    ReasoningTokens,
    /// Input tokens the workload planned.
    PlannedInputTokens,
    /// `usage.prompt_tokens`, else the input tokens the client planned or counted (vLLM's
    /// `input_lens` on import): vLLM's prompt length.
    InputTokens,
    /// Non-empty content chunks.
    ContentChunks,
    /// Non-empty reasoning chunks.
    ReasoningChunks,
    /// Non-empty reasoning or content chunks.
    OutputChunks,
    /// Every recorded event of the stream.
    AllChunks,
    /// Input ([`Count::InputTokens`]) plus output tokens.
    TotalTokens,
}

/// How a request-level metric is computed from one request's facts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Quantity {
    /// `to - from`, in milliseconds.
    Interval {
        /// Start anchor.
        from: Anchor,
        /// End anchor.
        to: Anchor,
    },
    /// `to - from`, in seconds (GuideLLM reports request latency in seconds).
    IntervalSeconds {
        /// Start anchor.
        from: Anchor,
        /// End anchor.
        to: Anchor,
    },
    /// `(to - from)` milliseconds divided by `(count - minus)`: mean time per token or chunk.
    PerUnit {
        /// Start anchor.
        from: Anchor,
        /// End anchor.
        to: Anchor,
        /// What the interval is divided among.
        count: Count,
        /// Subtracted from the count (1 = "after the first token").
        #[serde(default)]
        minus: u32,
    },
    /// `(count - minus)` per second of `to - from`, in the given form.
    Rate {
        /// What is counted.
        count: Count,
        /// Subtracted from the count.
        #[serde(default)]
        minus: u32,
        /// Start anchor.
        from: Anchor,
        /// End anchor.
        to: Anchor,
        /// How the rate is computed (`count_per_second` unless given).
        #[serde(default, skip_serializing_if = "super::options::is_default")]
        form: super::RateForm,
    },
    /// `num / den`.
    Ratio {
        /// Numerator.
        num: Count,
        /// Denominator.
        den: Count,
    },
    /// The count itself.
    Count {
        /// What is counted.
        count: Count,
    },
    /// Every gap between consecutive output chunks, pooled over requests, in milliseconds.
    Gaps,
    /// One statistic of the request's own output-chunk gaps, in milliseconds.
    GapStat {
        /// The statistic (e.g. max, p99).
        stat: Stat,
    },
}

/// A summary statistic, written as its key: `mean`, `min`, `max`, `std`, `median`, `sum`,
/// `samples`, or `pNN` (e.g. `p99`, `p99.9`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Stat {
    /// Arithmetic mean.
    Mean,
    /// Smallest value.
    Min,
    /// Largest value.
    Max,
    /// Standard deviation (population or sample as the protocol says).
    Std,
    /// The 50th percentile under the protocol's method.
    Median,
    /// Sum of values.
    Sum,
    /// Number of values.
    Samples,
    /// A percentile, 0..=100.
    Percentile(f64),
}

impl Stat {
    /// The key fragment of the statistic.
    pub fn key(&self) -> String {
        match self {
            Stat::Mean => "mean".into(),
            Stat::Min => "min".into(),
            Stat::Max => "max".into(),
            Stat::Std => "std".into(),
            Stat::Median => "median".into(),
            Stat::Sum => "sum".into(),
            Stat::Samples => "samples".into(),
            Stat::Percentile(p) => format!("p{p}"),
        }
    }
}

impl TryFrom<String> for Stat {
    type Error = String;

    fn try_from(s: String) -> Result<Stat, String> {
        Ok(match s.as_str() {
            "mean" => Stat::Mean,
            "min" => Stat::Min,
            "max" => Stat::Max,
            "std" => Stat::Std,
            "median" => Stat::Median,
            "sum" => Stat::Sum,
            "samples" | "count" => Stat::Samples,
            other => {
                let p = other
                    .strip_prefix('p')
                    .and_then(|p| p.parse::<f64>().ok())
                    .filter(|p| (0.0..=100.0).contains(p))
                    .ok_or_else(|| format!("unknown statistic `{other}` (mean, min, max, std, median, sum, samples, pNN)"))?;
                Stat::Percentile(p)
            }
        })
    }
}

impl From<Stat> for String {
    fn from(s: Stat) -> String {
        s.key()
    }
}

/// One request-level metric.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricDef {
    /// Name: the per-request column and the default key stem.
    pub name: String,
    /// How it is computed.
    pub quantity: Quantity,
    /// Unit shown in tables (`ms`, `tok/s`, `tokens`, …).
    #[serde(default)]
    pub unit: String,
    /// Statistics, when not the protocol's default list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<Vec<Stat>>,
    /// Summarized in `metrics` (false: per-request column only).
    #[serde(default = "yes")]
    pub summary: bool,
    /// Emitted per request (request rows, `request_timings`).
    #[serde(default = "yes")]
    pub per_request: bool,
    /// Flat key template for the summary, `{stat}` replaced by the statistic's key (anvil).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Weight of each request's value in token-weighted statistics (`cdf_search` percentile
    /// method only): `count - minus` per request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<Weight>,
    /// Flat key of the sample count (anvil), when not `{name}_samples`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples_key: Option<String>,
    /// The key under which the methodology describes this metric (None: not described).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub methodology_key: Option<String>,
    /// The methodology sentence, when the generated one is not what the protocol says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// What the metric stands for across protocols, whatever its name and definition here
    /// (`analyze --versus` pairs metrics by it; the HTML report draws its distributions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concept: Option<Concept>,
}

/// What a metric stands for, shared by protocols that name and define it differently (e.g.
/// capacity-v3 `ttft_ms` from send to the first content delta, AIPerf `time_to_first_token` to
/// the first output delta: both are the protocol's time to first token).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Concept {
    /// The protocol's time to first token.
    Ttft,
    /// Time from the first to the second token.
    Ttst,
    /// Time per output token of one request.
    Tpot,
    /// Inter-token latency per gap between chunks (pooled over requests).
    Itl,
    /// A request's end-to-end latency.
    E2e,
    /// Output tokens per second of one request.
    DecodeRate,
    /// Output tokens of one request.
    OutputTokens,
    /// Prompt tokens of one request.
    PromptTokens,
}

impl Concept {
    /// Every concept, in the order reports show them.
    pub const ALL: [Concept; 8] = [
        Concept::Ttft,
        Concept::Ttst,
        Concept::Tpot,
        Concept::Itl,
        Concept::E2e,
        Concept::DecodeRate,
        Concept::OutputTokens,
        Concept::PromptTokens,
    ];

    /// The name a reader sees.
    pub fn title(self) -> &'static str {
        match self {
            Concept::Ttft => "TTFT",
            Concept::Ttst => "TTST",
            Concept::Tpot => "TPOT",
            Concept::Itl => "ITL",
            Concept::E2e => "E2E latency",
            Concept::DecodeRate => "decode rate",
            Concept::OutputTokens => "output tokens",
            Concept::PromptTokens => "prompt tokens",
        }
    }
}

/// A per-request weight: `count - minus` (requests with weight 0 drop out).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Weight {
    /// What the weight counts.
    pub count: Count,
    /// Subtracted from the count.
    #[serde(default)]
    pub minus: u32,
}

fn yes() -> bool {
    true
}

/// One run-level value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AggregateDef {
    /// Key in the report.
    pub key: String,
    /// How it is computed.
    pub value: Aggregate,
}

/// How a run-level value is computed from the counted requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Aggregate {
    /// Sum of a count over counted requests (integer).
    Sum {
        /// What is summed.
        count: Count,
    },
    /// Requests whose count is known.
    Samples {
        /// What must be known.
        count: Count,
    },
    /// Number of requests per output token source.
    TokenSources,
    /// Sum of a count divided by the run's wall-clock seconds.
    PerWallSecond {
        /// What is summed.
        count: Count,
    },
    /// Counted successful requests per wall-clock second.
    RequestThroughput,
    /// Requests meeting every `--slo` per wall-clock second (null without SLOs).
    Goodput,
    /// Mean over requests of `num / den`, where both are known and `den > 0`.
    MeanRatio {
        /// Numerator.
        num: Count,
        /// Denominator.
        den: Count,
    },
    /// Wall-clock span of the counted requests in milliseconds: first send to last end.
    WallClockMs,
    /// The same span in seconds.
    WallClockS,
    /// Requests meeting every `--slo` per wall-clock second, as a number (null without SLOs).
    GoodputRate,
    /// Successful counted requests.
    Completed,
    /// Failed counted requests.
    Failed,
    /// The recorder's health report (RunEnd.client_health) and the flags raised from it.
    ClientHealth,
    /// Always null: the protocol defines the key but not a value.
    Null,
}

/// Which requests enter the statistics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestFilter {
    /// Phases that count (`--include-warmup` adds warmup).
    #[serde(default = "measured_only")]
    pub phases: Vec<Phase>,
    /// Outcomes whose requests enter the metrics; the others are reported as failures.
    #[serde(default = "ok_only")]
    pub outcomes: Vec<Outcome>,
}

fn measured_only() -> Vec<Phase> {
    vec![Phase::Measured]
}

fn ok_only() -> Vec<Outcome> {
    vec![Outcome::Ok]
}

impl Default for RequestFilter {
    fn default() -> Self {
        RequestFilter {
            phases: measured_only(),
            outcomes: ok_only(),
        }
    }
}
