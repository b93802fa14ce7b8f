//! The `timing_methodology` text of a protocol, generated from its definitions so that the
//! words can never drift from the arithmetic.

use crate::facts::GapChunks;
use crate::protocol::{
    Anchor, Count, MetricDef, Protocol, Quantity, ReportShape, Stat, TokenSource,
};
use crate::stats::StdKind;

/// How an anchor reads in a sentence.
pub fn anchor_phrase(a: Anchor) -> &'static str {
    match a {
        Anchor::Intended => "the intended (scheduled) request start",
        Anchor::Send => "request start",
        Anchor::Headers => "the arrival of the response headers",
        Anchor::FirstReasoning => "the first non-empty streamed reasoning delta",
        Anchor::FirstContent => "the first non-empty streamed content delta",
        Anchor::FirstOutput => "the first non-empty streamed reasoning or content delta",
        Anchor::SecondOutput => "the second non-empty streamed reasoning or content delta",
        Anchor::LastContent => "the last non-empty streamed content delta",
        Anchor::LastOutput => "the last non-empty streamed reasoning or content delta",
        Anchor::FirstChoice => {
            "the first streamed event carrying a choice (a role-only delta counts)"
        }
        Anchor::LastChoice => "the last streamed event carrying a choice",
        Anchor::End => "the end of the stream",
    }
}

/// How a count reads in a sentence.
pub fn count_phrase(c: Count) -> &'static str {
    match c {
        Count::OutputTokens => "output tokens",
        Count::PromptTokens => "usage.prompt_tokens",
        Count::CachedTokens => "usage cached prompt tokens",
        Count::ReasoningTokens => "usage reasoning tokens",
        Count::PlannedInputTokens => "planned input tokens",
        Count::ContentChunks => "non-empty content chunks",
        Count::ReasoningChunks => "non-empty reasoning chunks",
        Count::OutputChunks => "non-empty reasoning or content chunks",
        Count::AllChunks => "streamed events",
        Count::TotalTokens => "prompt plus output tokens",
    }
}

fn gap_phrase(g: GapChunks) -> &'static str {
    match g {
        GapChunks::Output => "non-empty reasoning or content chunks",
        GapChunks::Content => "non-empty content chunks",
        GapChunks::Choices => "events carrying a choice (role, reasoning, content, tool, finish)",
    }
}

fn minus_phrase(minus: u32) -> String {
    match minus {
        0 => String::new(),
        1 => " after the first".to_string(),
        n => format!(" minus {n}"),
    }
}

/// The generated sentence of one metric.
pub fn describe_quantity(q: &Quantity, gaps: GapChunks) -> String {
    match *q {
        Quantity::Interval { from, to } => {
            format!("{} through {}", anchor_phrase(from), anchor_phrase(to))
        }
        Quantity::IntervalSeconds { from, to } => format!(
            "{} through {}, in seconds",
            anchor_phrase(from),
            anchor_phrase(to)
        ),
        Quantity::PerUnit {
            from,
            to,
            count,
            minus,
        } => format!(
            "time from {} through {} divided by {}{}",
            anchor_phrase(from),
            anchor_phrase(to),
            count_phrase(count),
            minus_phrase(minus)
        ),
        Quantity::Rate {
            count,
            minus,
            from,
            to,
        } => format!(
            "{}{} per second from {} through {}",
            count_phrase(count),
            minus_phrase(minus),
            anchor_phrase(from),
            anchor_phrase(to)
        ),
        Quantity::Ratio { num, den } => {
            format!("{} divided by {}", count_phrase(num), count_phrase(den))
        }
        Quantity::Count { count } => format!("{} per request", count_phrase(count)),
        Quantity::Gaps => format!(
            "every arrival gap between consecutive {}, pooled over requests",
            gap_phrase(gaps)
        ),
        Quantity::GapStat { stat } => format!(
            "{} of the request's own arrival gaps between consecutive {}",
            stat.key(),
            gap_phrase(gaps)
        ),
    }
}

/// The sentence for `metric` under `protocol`.
pub fn describe_metric(protocol: &Protocol, metric: &MetricDef) -> String {
    let mut text = metric
        .description
        .clone()
        .unwrap_or_else(|| describe_quantity(&metric.quantity, protocol.gap_chunks));
    if let Some(w) = metric.weight {
        text.push_str(&format!(
            "; statistics weight each request by its {}{}",
            count_phrase(w.count),
            minus_phrase(w.minus)
        ));
    }
    if let Some(stats) = &metric.stats {
        if protocol.report != ReportShape::AnvilBenchmarkV1 {
            let keys: Vec<String> = stats.iter().map(|s| protocol.stat_key(*s)).collect();
            text.push_str(&format!("; reports {}", join_list(&keys)));
        }
    }
    text
}

/// "a, b, and c" (two items: "a and b").
fn join_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [a, b] => format!("{a} and {b}"),
        [init @ .., last] => format!("{}, and {last}", init.join(", ")),
    }
}

/// "request-level mean, min, …, and max using the nearest-rank percentile method".
pub fn distributions(protocol: &Protocol) -> String {
    let stats: Vec<String> = protocol
        .stats
        .iter()
        .filter(|s| **s != Stat::Samples)
        .map(|s| protocol.stat_key(*s))
        .collect();
    let mut text = format!(
        "request-level {} using {}",
        join_list(&stats),
        protocol.percentile_method.describe()
    );
    if protocol.stats.contains(&Stat::Std) {
        text.push_str(match protocol.std {
            StdKind::Population => "; std is the population standard deviation (divides by n)",
            StdKind::Sample => "; std is the sample standard deviation (divides by n - 1)",
        });
    }
    text
}

/// The output-token sentence.
pub fn token_sources(protocol: &Protocol) -> String {
    let phrases: Vec<&str> = protocol
        .token_sources
        .iter()
        .map(|s| match s {
            TokenSource::Usage => "usage.completion_tokens",
            TokenSource::ChunkTokens => {
                "the sum of per-chunk token counts (when every output chunk has one)"
            }
            TokenSource::Chunks => "one token per non-empty reasoning or content chunk",
            TokenSource::ClientCount => "the client tokenizer's count kept by the importer",
        })
        .collect();
    format!(
        "output tokens are {}; the source used is reported per request",
        phrases.join(", else ")
    )
}

/// The whole `timing_methodology` as (key, sentence). The anvil layout lists only the
/// metrics that carry a methodology key, plus clock and distributions, sorted by key.
pub fn timing_methodology(protocol: &Protocol) -> Vec<(String, String)> {
    let anvil = protocol.report == ReportShape::AnvilBenchmarkV1;
    let mut out: Vec<(String, String)> = vec![("clock".into(), protocol.clock.clone())];
    for metric in &protocol.metrics {
        let key = match (&metric.methodology_key, anvil) {
            (Some(k), _) => k.clone(),
            (None, false) => metric.name.clone(),
            (None, true) => continue,
        };
        out.push((key, describe_metric(protocol, metric)));
    }
    out.push(("distributions".into(), distributions(protocol)));
    if !anvil {
        out.push(("output_tokens".into(), token_sources(protocol)));
        let phases: Vec<String> = protocol
            .requests
            .phases
            .iter()
            .map(|p| format!("{p:?}"))
            .collect();
        let outcomes: Vec<String> = protocol
            .requests
            .outcomes
            .iter()
            .map(|o| o.name().to_string())
            .collect();
        out.push((
            "requests".into(),
            format!(
                "requests of phase {} with outcome {} enter the metrics; other outcomes are counted as failed",
                phases.join(" or "),
                outcomes.join(" or ")
            ),
        ));
    }
    out.extend(protocol.notes.iter().cloned());
    if anvil {
        out.sort_by(|a, b| a.0.cmp(&b.0));
    }
    out
}
