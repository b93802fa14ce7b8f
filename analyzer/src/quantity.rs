//! Evaluates protocol parts on one request's facts.

use crate::facts::RequestFacts;
use crate::protocol::{Anchor, Count, Quantity, Stat, TokenSource};
use crate::stats::{self, PercentileMethod, StdKind, Summation};

/// The time of `anchor` for this request, ns from the trace anchor.
pub fn anchor_ns(f: &RequestFacts, anchor: Anchor) -> Option<u64> {
    match anchor {
        Anchor::Intended => Some(f.intended_ns),
        Anchor::Send => Some(f.send_ns),
        Anchor::Headers => f.headers_ns,
        Anchor::FirstReasoning => f.first_reasoning_ns,
        Anchor::FirstContent => f.first_content_ns,
        Anchor::FirstOutput => f.first_output_ns,
        Anchor::SecondOutput => f.second_output_ns,
        Anchor::LastContent => f.last_content_ns,
        Anchor::LastOutput => f.last_output_ns,
        Anchor::FirstChoice => f.first_choice_ns,
        Anchor::LastChoice => f.last_choice_ns,
        Anchor::End => Some(f.end_ns),
    }
}

/// `to - from` in nanoseconds, as a float (negative if the anchors are out of order).
pub fn interval_ns(f: &RequestFacts, from: Anchor, to: Anchor) -> Option<f64> {
    let (a, b) = (anchor_ns(f, from)?, anchor_ns(f, to)?);
    Some((i128::from(b) - i128::from(a)) as f64)
}

/// `to - from` in milliseconds (negative if the anchors are out of order).
pub fn interval_ms(f: &RequestFacts, from: Anchor, to: Anchor) -> Option<f64> {
    Some(interval_ns(f, from, to)? / 1e6)
}

/// A `per_unit` quantity with its interval measured by `interval` (ms or ns): the interval
/// over `count - minus` units; None for other kinds or when the units are not positive.
fn per_unit(
    f: &RequestFacts,
    q: &Quantity,
    sources: &[TokenSource],
    interval: fn(&RequestFacts, Anchor, Anchor) -> Option<f64>,
) -> Option<f64> {
    let Quantity::PerUnit {
        from,
        to,
        count: c,
        minus,
    } = *q
    else {
        return None;
    };
    let units = count(f, c, sources)?
        .checked_sub(u64::from(minus))
        .filter(|&units| units > 0)?;
    Some(interval(f, from, to)? / units as f64)
}

/// The value of a time quantity (`interval` or `per_unit`) in nanoseconds, before any
/// conversion to ms; None for other kinds or when undefined for the request.
///
/// AIPerf keeps per-request times in integer ns and converts only its statistics (×1e-6 for
/// ms), so a statistic printed to the last bit needs the values in ns: the capacity report
/// reads AIPerf's metrics through this.
pub fn value_ns(f: &RequestFacts, q: &Quantity, sources: &[TokenSource]) -> Option<f64> {
    match *q {
        Quantity::Interval { from, to } => interval_ns(f, from, to),
        Quantity::PerUnit { .. } => per_unit(f, q, sources, interval_ns),
        _ => None,
    }
}

/// The request's output tokens and the first of `sources` that knows them.
pub fn output_tokens(f: &RequestFacts, sources: &[TokenSource]) -> Option<(u64, TokenSource)> {
    sources.iter().find_map(|&source| {
        let n = match source {
            TokenSource::Usage => f.usage.completion_tokens.map(u64::from),
            TokenSource::ChunkTokens => {
                let all_known = f.output_chunks() > 0 && f.chunks_with_tokens == f.output_chunks();
                all_known.then_some(f.chunk_tokens)
            }
            TokenSource::Chunks => Some(u64::from(f.output_chunks())),
            TokenSource::ClientCount => f.client_output_tokens.map(u64::from),
        };
        n.map(|n| (n, source))
    })
}

/// A per-request count; None when the trace does not know it.
pub fn count(f: &RequestFacts, c: Count, sources: &[TokenSource]) -> Option<u64> {
    match c {
        Count::OutputTokens => output_tokens(f, sources).map(|(n, _)| n),
        Count::PromptTokens => f.usage.prompt_tokens.map(u64::from),
        Count::CachedTokens => f.usage.cached_tokens.map(u64::from),
        Count::ReasoningTokens => f.usage.reasoning_tokens.map(u64::from),
        Count::PlannedInputTokens => f.planned_input_tokens.map(u64::from),
        Count::InputTokens => f
            .usage
            .prompt_tokens
            .or(f.planned_input_tokens)
            .map(u64::from),
        Count::ContentChunks => Some(u64::from(f.content_chunks)),
        Count::ReasoningChunks => Some(u64::from(f.reasoning_chunks)),
        Count::OutputChunks => Some(u64::from(f.output_chunks())),
        Count::AllChunks => Some(u64::from(f.total_chunks)),
        Count::TotalTokens => {
            Some(count(f, Count::InputTokens, sources)? + count(f, Count::OutputTokens, sources)?)
        }
    }
}

/// Context a quantity needs beyond the request itself.
#[derive(Debug, Clone, Copy)]
pub struct EvalContext<'a> {
    /// The protocol's token sources.
    pub sources: &'a [TokenSource],
    /// The pooled gap list (empty when not kept).
    pub gaps: &'a [u64],
    /// Percentile method for gap statistics.
    pub method: PercentileMethod,
    /// Summation for gap means.
    pub summation: Summation,
    /// Standard deviation kind for gap statistics.
    pub std: StdKind,
}

/// The single value of a quantity for one request (None when undefined for it). `Gaps` has no
/// single value; its per-request value is the request's mean gap.
pub fn value(f: &RequestFacts, q: &Quantity, cx: &EvalContext<'_>) -> Option<f64> {
    match *q {
        Quantity::Interval { from, to } => interval_ms(f, from, to),
        Quantity::IntervalSeconds { from, to } => Some(interval_ns(f, from, to)? / 1e9),
        Quantity::PerUnit { .. } => per_unit(f, q, cx.sources, interval_ms),
        Quantity::Rate {
            count: c,
            minus,
            from,
            to,
        } => {
            let n = count(f, c, cx.sources)?.checked_sub(u64::from(minus))?;
            let ms = interval_ms(f, from, to)?;
            // Written as count / (ms / 1000) because that is how the reports we reproduce
            // round it.
            (ms > 0.0).then(|| n as f64 / (ms / 1000.0))
        }
        Quantity::Ratio { num, den } => {
            let d = count(f, den, cx.sources)?;
            (d > 0).then_some(count(f, num, cx.sources)? as f64 / d as f64)
        }
        Quantity::Count { count: c } => count(f, c, cx.sources).map(|n| n as f64),
        Quantity::Gaps => {
            let gaps = f.gap_count();
            if gaps == 0 {
                return None;
            }
            interval_ms(f, Anchor::FirstOutput, Anchor::LastOutput).map(|ms| ms / f64::from(gaps))
        }
        Quantity::GapStat { stat } => gap_stat(f, stat, cx),
    }
}

/// One statistic of a request's own gaps, in ms. `max` works without kept gaps.
fn gap_stat(f: &RequestFacts, stat: Stat, cx: &EvalContext<'_>) -> Option<f64> {
    if stat == Stat::Max {
        return f.max_gap_ns.map(|g| g as f64 / 1e6);
    }
    let own = f.gaps(cx.gaps);
    if own.is_empty() {
        return None;
    }
    let ms: Vec<f64> = own.iter().map(|&g| g as f64 / 1e6).collect();
    summarize(ms, &[stat], cx.method, cx.summation, cx.std)[0]
}

/// Computes `stats` over `values` given in request order: sums, means and std add in that
/// order (the order the reproduced tools add in), percentiles read the sorted values.
pub fn summarize(
    mut values: Vec<f64>,
    wanted: &[Stat],
    method: PercentileMethod,
    summation: Summation,
    std: StdKind,
) -> Vec<Option<f64>> {
    let mut out: Vec<Option<f64>> = wanted
        .iter()
        .map(|stat| match stat {
            Stat::Samples => Some(values.len() as f64),
            Stat::Mean => stats::mean(&values, summation),
            Stat::Std => stats::std_dev(&values, std, summation),
            Stat::Sum => (!values.is_empty()).then(|| stats::sum(&values, summation)),
            _ => None,
        })
        .collect();
    stats::sort(&mut values);
    for (slot, stat) in out.iter_mut().zip(wanted) {
        *slot = match *stat {
            Stat::Min => values.first().copied(),
            Stat::Max => values.last().copied(),
            Stat::Median => stats::percentile(&values, 50.0, method),
            Stat::Percentile(p) => stats::percentile(&values, p, method),
            _ => *slot,
        };
    }
    out
}

/// Computes `stats` over (value, weight) pairs the way GuideLLM summarizes a distribution:
/// weighted mean and population std, `samples` = round(Σ weight), `sum` = mean × samples,
/// percentiles by weighted CDF search.
pub fn summarize_weighted(pairs: Vec<(f64, f64)>, wanted: &[Stat]) -> Vec<Option<f64>> {
    let Some(dist) = stats::Weighted::new(pairs) else {
        return wanted
            .iter()
            .map(|s| (*s == Stat::Samples).then_some(0.0))
            .collect();
    };
    wanted
        .iter()
        .map(|stat| {
            Some(match *stat {
                Stat::Samples => dist.count(),
                Stat::Mean => dist.mean(),
                Stat::Std => dist.std(),
                Stat::Min => dist.min(),
                Stat::Max => dist.max(),
                Stat::Sum => dist.mean() * dist.count(),
                Stat::Median => dist.percentile(50.0)?,
                Stat::Percentile(p) => dist.percentile(p)?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::tests::{chunk, record};
    use crate::facts::{summarize_record, GapChunks};
    use tokentrace_format::Channel;

    #[test]
    fn time_quantities_in_ns_are_the_unconverted_values() {
        // Sent at 1 µs; output at 3, 5 and 9 µs.
        let r = record(vec![
            chunk(3_000, Channel::Content, 3, None),
            chunk(5_000, Channel::Content, 3, None),
            chunk(9_000, Channel::Content, 3, None),
        ]);
        let f = summarize_record(0, &r, GapChunks::Output, None);
        let sources = [TokenSource::Chunks];
        let ttft = Quantity::Interval {
            from: Anchor::Send,
            to: Anchor::FirstOutput,
        };
        assert_eq!(value_ns(&f, &ttft, &sources), Some(2_000.0));
        let per_token = |minus| Quantity::PerUnit {
            from: Anchor::FirstOutput,
            to: Anchor::LastOutput,
            count: Count::OutputTokens,
            minus,
        };
        assert_eq!(value_ns(&f, &per_token(1), &sources), Some(3_000.0));
        assert_eq!(value_ns(&f, &per_token(3), &sources), None);
        assert_eq!(value_ns(&f, &Quantity::Gaps, &sources), None);
        assert_eq!(
            interval_ms(&f, Anchor::Send, Anchor::LastOutput),
            Some(0.008)
        );
    }
}
