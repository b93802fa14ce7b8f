//! Protocols: named, versioned sets of metric definitions, built from a few parts.
//!
//! A protocol is plain data (deserializable from TOML, which is how the built-in ones are
//! written, see `builtin/`): which requests count, where each time is anchored, where output
//! tokens come from, which statistics are reported under which keys, and the percentile method.
//! Small functions in [`crate::quantity`] evaluate the parts on [`crate::facts::RequestFacts`].

pub mod builtin;
mod options;
mod parts;

pub use options::*;
pub use parts::*;

use crate::stats::{PercentileMethod, StdKind, Summation};
use serde::{Deserialize, Serialize};

/// One protocol definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Protocol {
    /// Name used on the command line (`--protocol NAME`).
    pub name: String,
    /// Version of this definition; bumped whenever a number it produces could change.
    pub version: u32,
    /// One line on what the protocol is for.
    pub description: String,
    /// Where the definitions come from (file and version of the tool it mirrors).
    #[serde(default)]
    pub source: String,
    /// The report layout.
    #[serde(default)]
    pub report: ReportShape,
    /// The clock the report names in its methodology.
    #[serde(default = "default_clock")]
    pub clock: String,
    /// Which requests enter the statistics.
    #[serde(default)]
    pub requests: RequestFilter,
    /// Where a request's output token count comes from, first available wins.
    #[serde(default = "default_token_sources")]
    pub token_sources: Vec<TokenSource>,
    /// Which chunks inter-chunk gaps run between.
    #[serde(default)]
    pub gap_chunks: crate::facts::GapChunks,
    /// Whether non-empty tool-call deltas are output (`output`, the default) or not
    /// (`ignored`).
    #[serde(default)]
    pub tool_calls: crate::facts::ToolCalls,
    /// How percentiles are read.
    pub percentile_method: PercentileMethod,
    /// How means (and std) add values up.
    #[serde(default = "default_summation")]
    pub summation: Summation,
    /// Which standard deviation `std` means.
    #[serde(default = "default_std")]
    pub std: StdKind,
    /// The unit statistics of times are taken in (`converted` unless given).
    #[serde(default, skip_serializing_if = "options::is_default")]
    pub time_statistics: TimeStatistics,
    /// What a time whose end precedes its start becomes (`keep` unless given).
    #[serde(default, skip_serializing_if = "options::is_default")]
    pub negative_times: NegativeTimes,
    /// The span run-level rates divide by (first send to last end of every request of the
    /// counted phases unless given).
    #[serde(default, skip_serializing_if = "options::is_default")]
    pub wall_clock: WallClock,
    /// Key under which a statistic is written, when not its own name (e.g. mean = "avg").
    #[serde(default)]
    pub stat_keys: std::collections::BTreeMap<String, String>,
    /// Statistics reported for a metric that does not list its own.
    pub stats: Vec<Stat>,
    /// Request-level metrics, in report order.
    pub metrics: Vec<MetricDef>,
    /// Run-level values, in report order.
    #[serde(default)]
    pub aggregates: Vec<AggregateDef>,
    /// Extra methodology sentences (key, text) emitted after the generated ones.
    #[serde(default)]
    pub notes: Vec<(String, String)>,
    /// Whether `timing_methodology` carries the `distributions` sentence (false for a report
    /// whose own methodology has none).
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub describe_distributions: bool,
}

fn yes() -> bool {
    true
}

fn is_true(value: &bool) -> bool {
    *value
}

fn default_clock() -> String {
    "client CLOCK_MONOTONIC, read when the bytes of a chunk were received, before parsing".into()
}

fn default_token_sources() -> Vec<TokenSource> {
    vec![
        TokenSource::Usage,
        TokenSource::ChunkTokens,
        TokenSource::Chunks,
    ]
}

fn default_summation() -> Summation {
    Summation::Naive
}

fn default_std() -> StdKind {
    StdKind::Population
}

/// The JSON layout a protocol's report takes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum ReportShape {
    /// tokentrace's own layout: `metrics.NAME.STAT`, in protocol order.
    #[default]
    Nested,
    /// The `anvil-serving.benchmark/v1` report: flat metric keys sorted alphabetically, run
    /// metadata from the manifest and labels, `request_timings` and `failures`.
    AnvilBenchmarkV1,
    /// One flat object: aggregates, then every metric statistic under its key template, in
    /// protocol order (the layout of `vllm bench serve --save-result` and SGLang).
    Flat,
}

/// Errors in a protocol definition or its lookup.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    /// No protocol of that name.
    #[error("unknown protocol `{name}` (known: {known})")]
    Unknown {
        /// The name asked for.
        name: String,
        /// The names available.
        known: String,
    },
    /// A protocol file did not parse.
    #[error("protocol file {path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// What was wrong.
        message: String,
    },
    /// A protocol parsed but is inconsistent.
    #[error("protocol `{name}`: {message}")]
    Invalid {
        /// The protocol.
        name: String,
        /// What is inconsistent.
        message: String,
    },
}

impl Protocol {
    /// Parses one protocol from TOML text; `origin` names the file in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<Protocol, ProtocolError> {
        let protocol: Protocol = toml::from_str(text).map_err(|e| ProtocolError::Parse {
            path: origin.to_string(),
            message: e.to_string(),
        })?;
        protocol.validate()?;
        Ok(protocol)
    }

    /// The definition as TOML (what `tokentrace protocols NAME` prints).
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_else(|e| format!("# cannot render: {e}\n"))
    }

    /// Checks what the type system cannot: unique names, sensible percentiles.
    pub fn validate(&self) -> Result<(), ProtocolError> {
        let invalid = |message: String| ProtocolError::Invalid {
            name: self.name.clone(),
            message,
        };
        let mut seen = std::collections::HashSet::new();
        for metric in &self.metrics {
            if !seen.insert(metric.name.as_str()) {
                return Err(invalid(format!("metric `{}` defined twice", metric.name)));
            }
            for stat in metric.stats.as_ref().unwrap_or(&self.stats) {
                if let Stat::Percentile(p) = stat {
                    if !(0.0..=100.0).contains(p) {
                        return Err(invalid(format!("percentile p{p} is outside 0..=100")));
                    }
                }
            }
        }
        if self.token_sources.is_empty() {
            return Err(invalid("token_sources is empty".into()));
        }
        Ok(())
    }

    /// The statistics of `metric` (its own list or the protocol default).
    pub fn stats_of<'a>(&'a self, metric: &'a MetricDef) -> &'a [Stat] {
        metric.stats.as_deref().unwrap_or(&self.stats)
    }

    /// The key a statistic is written under.
    pub fn stat_key(&self, stat: Stat) -> String {
        let own = stat.key();
        self.stat_keys.get(&own).cloned().unwrap_or(own)
    }

    /// The flat key of `stat` of `metric` (template `{stat}` replaced; samples key apart).
    pub fn flat_key(&self, metric: &MetricDef, stat: Stat) -> String {
        if stat == Stat::Samples {
            if let Some(k) = &metric.samples_key {
                return k.clone();
            }
        }
        let template = metric
            .key
            .clone()
            .unwrap_or_else(|| format!("{}_{{stat}}", metric.name));
        template.replace("{stat}", &self.stat_key(stat))
    }

    /// The chunk-counting rules of the protocol (gap chunks and tool calls).
    pub fn chunk_rules(&self) -> crate::facts::ChunkRules {
        crate::facts::ChunkRules {
            gap_chunks: self.gap_chunks,
            tool_calls: self.tool_calls,
        }
    }

    /// Whether any metric needs the pooled per-gap list.
    pub fn needs_gaps(&self) -> bool {
        self.metrics
            .iter()
            .any(|m| matches!(m.quantity, Quantity::Gaps))
    }
}
