//! The `timing_methodology` text of a protocol, generated from its definitions so that the
//! words can never drift from the arithmetic.

use crate::facts::{GapChunks, ToolCalls};
use crate::protocol::{
    Anchor, Count, MetricDef, NegativeTimes, Protocol, Quantity, RateForm, ReportShape, Stat,
    TimeStatistics, TokenSource, WallClock, WallClockRequests,
};
use crate::stats::StdKind;
use tokentrace_format::Outcome;

/// How an anchor reads in a sentence, with tool-call deltas counted as output or not.
pub fn anchor_phrase(a: Anchor, tools: ToolCalls) -> &'static str {
    let counted = tools == ToolCalls::Output;
    match (a, counted) {
        (Anchor::Intended, _) => "the intended (scheduled) request start",
        (Anchor::Send, _) => "request start",
        (Anchor::Headers, _) => "the arrival of the response headers",
        (Anchor::FirstReasoning, _) => "the first non-empty streamed reasoning delta",
        (Anchor::FirstContent, false) => "the first non-empty streamed content delta",
        (Anchor::FirstContent, true) => "the first non-empty streamed content or tool-call delta",
        (Anchor::FirstOutput, false) => "the first non-empty streamed reasoning or content delta",
        (Anchor::FirstOutput, true) => {
            "the first non-empty streamed reasoning, content or tool-call delta"
        }
        (Anchor::SecondOutput, false) => "the second non-empty streamed reasoning or content delta",
        (Anchor::SecondOutput, true) => {
            "the second non-empty streamed reasoning, content or tool-call delta"
        }
        (Anchor::LastContent, false) => "the last non-empty streamed content delta",
        (Anchor::LastContent, true) => "the last non-empty streamed content or tool-call delta",
        (Anchor::LastOutput, false) => "the last non-empty streamed reasoning or content delta",
        (Anchor::LastOutput, true) => {
            "the last non-empty streamed reasoning, content or tool-call delta"
        }
        (Anchor::FirstChoice, _) => {
            "the first streamed event carrying a choice (a role-only delta counts)"
        }
        (Anchor::LastChoice, _) => "the last streamed event carrying a choice",
        (Anchor::End, _) => "the end of the stream",
    }
}

/// How a count reads in a sentence, with tool-call deltas counted as output or not.
pub fn count_phrase(c: Count, tools: ToolCalls) -> &'static str {
    let counted = tools == ToolCalls::Output;
    match (c, counted) {
        (Count::OutputTokens, _) => "output tokens",
        (Count::PromptTokens, _) => "usage.prompt_tokens",
        (Count::CachedTokens, _) => "usage cached prompt tokens",
        (Count::ReasoningTokens, _) => "usage reasoning tokens",
        (Count::PlannedInputTokens, _) => "planned input tokens",
        (Count::InputTokens, _) => "input tokens (usage.prompt_tokens, else the client's count)",
        (Count::ContentChunks, false) => "non-empty content chunks",
        (Count::ContentChunks, true) => "non-empty content or tool-call chunks",
        (Count::ReasoningChunks, _) => "non-empty reasoning chunks",
        (Count::OutputChunks, false) => "non-empty reasoning or content chunks",
        (Count::OutputChunks, true) => "non-empty reasoning, content or tool-call chunks",
        (Count::AllChunks, _) => "streamed events",
        (Count::TotalTokens, _) => "input plus output tokens",
    }
}

fn gap_phrase(g: GapChunks, tools: ToolCalls) -> &'static str {
    match g {
        GapChunks::Output => count_phrase(Count::OutputChunks, tools),
        GapChunks::Content => count_phrase(Count::ContentChunks, tools),
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
pub fn describe_quantity(q: &Quantity, gaps: GapChunks, tools: ToolCalls) -> String {
    match *q {
        Quantity::Interval { from, to } => {
            format!(
                "{} through {}",
                anchor_phrase(from, tools),
                anchor_phrase(to, tools)
            )
        }
        Quantity::IntervalSeconds { from, to } => format!(
            "{} through {}, in seconds",
            anchor_phrase(from, tools),
            anchor_phrase(to, tools)
        ),
        Quantity::PerUnit {
            from,
            to,
            count,
            minus,
        } => format!(
            "time from {} through {} divided by {}{}",
            anchor_phrase(from, tools),
            anchor_phrase(to, tools),
            count_phrase(count, tools),
            minus_phrase(minus)
        ),
        Quantity::Rate {
            count,
            minus,
            from,
            to,
            form: RateForm::CountPerSecond,
        } => format!(
            "{}{} per second from {} through {}",
            count_phrase(count, tools),
            minus_phrase(minus),
            anchor_phrase(from, tools),
            anchor_phrase(to, tools)
        ),
        Quantity::Rate {
            count,
            minus,
            from,
            to,
            form: RateForm::ReciprocalPerUnit,
        } => format!(
            "the reciprocal of the time in seconds from {} through {} divided by {}{}, undefined when that time is not positive",
            anchor_phrase(from, tools),
            anchor_phrase(to, tools),
            count_phrase(count, tools),
            minus_phrase(minus)
        ),
        Quantity::Ratio { num, den } => {
            format!(
                "{} divided by {}",
                count_phrase(num, tools),
                count_phrase(den, tools)
            )
        }
        Quantity::Count { count } => format!("{} per request", count_phrase(count, tools)),
        Quantity::Gaps => format!(
            "every arrival gap between consecutive {}, pooled over requests",
            gap_phrase(gaps, tools)
        ),
        Quantity::GapStat { stat } => format!(
            "{} of the request's own arrival gaps between consecutive {}",
            stat.key(),
            gap_phrase(gaps, tools)
        ),
    }
}

/// The sentence for `metric` under `protocol`.
pub fn describe_metric(protocol: &Protocol, metric: &MetricDef) -> String {
    let mut text = metric.description.clone().unwrap_or_else(|| {
        describe_quantity(&metric.quantity, protocol.gap_chunks, protocol.tool_calls)
    });
    if let Some(w) = metric.weight {
        text.push_str(&format!(
            "; statistics weight each request by its {}{}",
            count_phrase(w.count, protocol.tool_calls),
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
            TokenSource::Chunks => match protocol.tool_calls {
                ToolCalls::Output => {
                    "one token per non-empty reasoning, content or tool-call chunk"
                }
                ToolCalls::Ignored => "one token per non-empty reasoning or content chunk",
            },
            TokenSource::ClientCount => "the client tokenizer's count kept by the importer",
        })
        .collect();
    format!(
        "output tokens are {}; the source used is reported per request",
        phrases.join(", else ")
    )
}

/// The tool-call sentence: whether tool-call deltas are output under the protocol.
pub fn tool_calls(protocol: &Protocol) -> String {
    match protocol.tool_calls {
        ToolCalls::Output => "a non-empty tool-call delta (function name and arguments) is output, counted as content is: it anchors first and last output and content, and counts as a content chunk".into(),
        ToolCalls::Ignored => {
            let mut text = String::from(
                "tool-call deltas are not output: no output anchor, chunk count or chunk-based token count includes them",
            );
            if uses_choices(protocol) {
                text.push_str("; as events carrying a choice they do enter the choice anchors");
            }
            text
        }
    }
}

/// Whether any metric reads the choice anchors or the gaps between events carrying a choice.
pub(crate) fn uses_choices(protocol: &Protocol) -> bool {
    let choice = |a: Anchor| matches!(a, Anchor::FirstChoice | Anchor::LastChoice);
    protocol.metrics.iter().any(|m| match m.quantity {
        Quantity::Interval { from, to }
        | Quantity::IntervalSeconds { from, to }
        | Quantity::PerUnit { from, to, .. }
        | Quantity::Rate { from, to, .. } => choice(from) || choice(to),
        Quantity::Gaps | Quantity::GapStat { .. } => protocol.gap_chunks == GapChunks::Choices,
        Quantity::Ratio { .. } | Quantity::Count { .. } => false,
    })
}

/// The request-filter sentence.
pub fn requests(protocol: &Protocol) -> String {
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
    let mut text = format!(
        "requests of phase {} with outcome {} enter the metrics; other outcomes are counted as failed",
        phases.join(" or "),
        outcomes.join(" or ")
    );
    if protocol.requests.outcomes.contains(&Outcome::MissingDone) {
        text.push_str(
            "; missing_done is a stream that ended cleanly after a finish_reason but without data: [DONE], and every report counts such requests in a missing_done note",
        );
    }
    text
}

/// The sentences of the arithmetic options a protocol sets away from their defaults
/// (`time_statistics`, `negative_times`, `wall_clock`), so a protocol that sets none has none.
pub fn arithmetic(protocol: &Protocol) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if protocol.time_statistics == TimeStatistics::Ns {
        out.push((
            "time_statistics".into(),
            "statistics of a time are taken of its nanosecond values, then each but the sample count is multiplied by 1e-6 for ms or 1e-9 for s; the wall clock in seconds is its nanosecond span times 1e-9".into(),
        ));
    }
    if protocol.negative_times == NegativeTimes::Clamp {
        out.push((
            "negative_times".into(),
            "a time whose end comes before its start is clamped to 0, and the request stays counted".into(),
        ));
    }
    let clock = protocol.wall_clock;
    if clock != WallClock::default() {
        let tools = protocol.tool_calls;
        let requests = match clock.requests {
            WallClockRequests::All => "the requests of the counted phases (failed ones included)",
            WallClockRequests::Counted => "the requests that enter the metrics",
        };
        let mut text = format!(
            "the wall clock, which run-level rates divide by, runs from the minimum of {} through the maximum of {}, both taken over {requests}; a request that never reached one of them is left out",
            anchor_phrase(clock.from, tools),
            anchor_phrase(clock.to, tools)
        );
        if !clock.imported_window {
            text.push_str("; an imported run's own window is not used");
        }
        out.push(("wall_clock".into(), text));
    }
    out
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
    if protocol.describe_distributions {
        out.push(("distributions".into(), distributions(protocol)));
    }
    if !anvil {
        out.push(("output_tokens".into(), token_sources(protocol)));
        out.push(("tool_calls".into(), tool_calls(protocol)));
        out.push(("requests".into(), requests(protocol)));
    }
    out.extend(arithmetic(protocol));
    out.extend(protocol.notes.iter().cloned());
    if anvil {
        out.sort_by(|a, b| a.0.cmp(&b.0));
    }
    out
}
