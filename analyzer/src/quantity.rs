//! Evaluates protocol parts on one request's facts.

use crate::facts::RequestFacts;
use crate::protocol::{
    Anchor, Count, NegativeTimes, Protocol, Quantity, RateForm, Stat, TokenSource, WallClock,
};
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

/// `to - from` in nanoseconds under the protocol's rule for negative times.
fn time_ns(f: &RequestFacts, from: Anchor, to: Anchor, cx: &EvalContext<'_>) -> Option<f64> {
    let ns = interval_ns(f, from, to)?;
    Some(match cx.negative_times {
        NegativeTimes::Keep => ns,
        NegativeTimes::Clamp => ns.max(0.0),
    })
}

/// The units an interval is divided among: `count - minus`, when positive.
fn units(f: &RequestFacts, c: Count, minus: u32, sources: &[TokenSource]) -> Option<u64> {
    count(f, c, sources)?
        .checked_sub(u64::from(minus))
        .filter(|&units| units > 0)
}

/// The interval from `from` to `to` in ns over `count - minus` units; None when the units are
/// not positive.
fn per_unit_ns(
    f: &RequestFacts,
    (from, to): (Anchor, Anchor),
    c: Count,
    minus: u32,
    cx: &EvalContext<'_>,
) -> Option<f64> {
    let units = units(f, c, minus, cx.sources)?;
    Some(time_ns(f, from, to, cx)? / units as f64)
}

/// The value of a time quantity in nanoseconds, before any conversion to its unit (a
/// `gaps` metric's per-request value is its mean gap; its pooled values are the gaps
/// themselves); None for other kinds or when undefined for the request.
///
/// Under `time_statistics = "ns"` statistics are taken of these values and then multiplied by
/// [`ns_factor`], as AIPerf keeps per-request times in integer ns and converts only its
/// results (×1e-6 for ms): a statistic printed to the last bit needs the values in ns.
pub fn value_ns(f: &RequestFacts, q: &Quantity, cx: &EvalContext<'_>) -> Option<f64> {
    match *q {
        Quantity::Interval { from, to } | Quantity::IntervalSeconds { from, to } => {
            time_ns(f, from, to, cx)
        }
        Quantity::PerUnit {
            from,
            to,
            count: c,
            minus,
        } => per_unit_ns(f, (from, to), c, minus, cx),
        Quantity::Gaps => {
            let gaps = f.gap_count();
            if gaps == 0 {
                return None;
            }
            interval_ns(f, Anchor::FirstOutput, Anchor::LastOutput).map(|ns| ns / f64::from(gaps))
        }
        Quantity::GapStat { stat } if stat != Stat::Samples => gap_stat(f, stat, cx, 1.0),
        _ => None,
    }
}

/// The factor that turns a time quantity's ns value (or a statistic of such values) into its
/// unit: 1e-6 for ms, 1e-9 for s; None for quantities that are not times.
pub fn ns_factor(q: &Quantity) -> Option<f64> {
    match *q {
        Quantity::Interval { .. } | Quantity::PerUnit { .. } | Quantity::Gaps => Some(1e-6),
        Quantity::GapStat { stat } if stat != Stat::Samples => Some(1e-6),
        Quantity::IntervalSeconds { .. } => Some(1e-9),
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
    /// What a negative time becomes.
    pub negative_times: NegativeTimes,
}

impl<'a> EvalContext<'a> {
    /// The context of `protocol`'s definitions, with the pooled gap list `gaps`.
    pub fn new(protocol: &'a Protocol, gaps: &'a [u64]) -> EvalContext<'a> {
        EvalContext {
            sources: &protocol.token_sources,
            gaps,
            method: protocol.percentile_method,
            summation: protocol.summation,
            std: protocol.std,
            negative_times: protocol.negative_times,
        }
    }
}

/// The single value of a quantity for one request (None when undefined for it). `Gaps` has no
/// single value; its per-request value is the request's mean gap.
pub fn value(f: &RequestFacts, q: &Quantity, cx: &EvalContext<'_>) -> Option<f64> {
    match *q {
        Quantity::Interval { from, to } => Some(time_ns(f, from, to, cx)? / 1e6),
        Quantity::IntervalSeconds { from, to } => Some(time_ns(f, from, to, cx)? / 1e9),
        Quantity::PerUnit {
            from,
            to,
            count: c,
            minus,
        } => {
            let units = units(f, c, minus, cx.sources)?;
            Some(time_ns(f, from, to, cx)? / 1e6 / units as f64)
        }
        Quantity::Rate {
            count: c,
            minus,
            from,
            to,
            form: RateForm::CountPerSecond,
        } => {
            let n = count(f, c, cx.sources)?.checked_sub(u64::from(minus))?;
            let ms = time_ns(f, from, to, cx)? / 1e6;
            // Written as count / (ms / 1000) because that is how the reports we reproduce
            // round it.
            (ms > 0.0).then(|| n as f64 / (ms / 1000.0))
        }
        Quantity::Rate {
            count: c,
            minus,
            from,
            to,
            form: RateForm::ReciprocalPerUnit,
        } => {
            // AIPerf inverts its ITL (ns) converted to seconds by multiplying by 1e-9.
            let per_unit = per_unit_ns(f, (from, to), c, minus, cx)?;
            (per_unit > 0.0).then(|| 1.0 / (per_unit * 1e-9))
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
        Quantity::GapStat { stat } => gap_stat(f, stat, cx, 1e6),
    }
}

/// The span of `clock` one request covers, (from, to) in ns from its trace anchor; None when
/// it did not reach both anchors.
pub fn span_ns(f: &RequestFacts, clock: &WallClock) -> Option<(u64, u64)> {
    Some((anchor_ns(f, clock.from)?, anchor_ns(f, clock.to)?))
}

/// One statistic of a request's own gaps, in ns divided by `divisor` (1e6 for ms). `max`
/// works without kept gaps.
fn gap_stat(f: &RequestFacts, stat: Stat, cx: &EvalContext<'_>, divisor: f64) -> Option<f64> {
    if stat == Stat::Max {
        return f.max_gap_ns.map(|g| g as f64 / divisor);
    }
    let own = f.gaps(cx.gaps);
    if own.is_empty() {
        return None;
    }
    let values: Vec<f64> = own.iter().map(|&g| g as f64 / divisor).collect();
    summarize(values, &[stat], cx.method, cx.summation, cx.std)[0]
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

    /// The context of `sources`, with negative times treated as `negative`.
    fn context(sources: &[TokenSource], negative: NegativeTimes) -> EvalContext<'_> {
        EvalContext {
            sources,
            gaps: &[],
            method: PercentileMethod::Linear,
            summation: Summation::Naive,
            std: StdKind::Population,
            negative_times: negative,
        }
    }

    fn per_token(minus: u32) -> Quantity {
        Quantity::PerUnit {
            from: Anchor::FirstOutput,
            to: Anchor::LastOutput,
            count: Count::OutputTokens,
            minus,
        }
    }

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
        let cx = context(&sources, NegativeTimes::Keep);
        let ttft = Quantity::Interval {
            from: Anchor::Send,
            to: Anchor::FirstOutput,
        };
        assert_eq!(value_ns(&f, &ttft, &cx), Some(2_000.0));
        assert_eq!(ns_factor(&ttft), Some(1e-6));
        assert_eq!(value_ns(&f, &per_token(1), &cx), Some(3_000.0));
        assert_eq!(value_ns(&f, &per_token(3), &cx), None);
        // A gaps metric's per-request value is its mean gap.
        assert_eq!(value_ns(&f, &Quantity::Gaps, &cx), Some(3_000.0));
        let count = Quantity::Count {
            count: Count::OutputTokens,
        };
        assert_eq!((value_ns(&f, &count, &cx), ns_factor(&count)), (None, None));
        assert_eq!(
            interval_ms(&f, Anchor::Send, Anchor::LastOutput),
            Some(0.008)
        );
    }

    #[test]
    fn negative_times_are_kept_or_clamped_as_the_protocol_says() {
        // Sent at 1 µs; the first output stamped at 0.5 µs, the last at 0.9 µs.
        let r = record(vec![
            chunk(500, Channel::Content, 3, None),
            chunk(900, Channel::Content, 3, None),
        ]);
        let f = summarize_record(0, &r, GapChunks::Output, None);
        let sources = [TokenSource::Chunks];
        let ttft = Quantity::Interval {
            from: Anchor::Send,
            to: Anchor::FirstOutput,
        };
        let keep = context(&sources, NegativeTimes::Keep);
        let clamp = context(&sources, NegativeTimes::Clamp);
        assert_eq!(value(&f, &ttft, &keep), Some(-0.0005));
        assert_eq!(value(&f, &ttft, &clamp), Some(0.0));
        assert_eq!(value_ns(&f, &ttft, &clamp), Some(0.0));
        // Only the time is clamped: first to last output stays 400 ns over one token.
        assert_eq!(value_ns(&f, &per_token(1), &clamp), Some(400.0));
    }

    #[test]
    fn a_reciprocal_rate_inverts_the_time_per_unit_in_seconds() {
        // Output at 3, 5 and 9 µs: 3 µs per token after the first.
        let r = record(vec![
            chunk(3_000, Channel::Content, 3, None),
            chunk(5_000, Channel::Content, 3, None),
            chunk(9_000, Channel::Content, 3, None),
        ]);
        let f = summarize_record(0, &r, GapChunks::Output, None);
        let sources = [TokenSource::Chunks];
        let cx = context(&sources, NegativeTimes::Keep);
        let rate = |minus, form| Quantity::Rate {
            count: Count::OutputTokens,
            minus,
            from: Anchor::FirstOutput,
            to: Anchor::LastOutput,
            form,
        };
        let reciprocal = value(&f, &rate(1, RateForm::ReciprocalPerUnit), &cx);
        assert_eq!(reciprocal, Some(1.0 / (3_000.0 * 1e-9)));
        let divided = value(&f, &rate(1, RateForm::CountPerSecond), &cx);
        assert_eq!(divided, Some(2.0 / (0.006 / 1000.0)));
        // No unit after the first: no time per unit to invert, where the division gives 0.
        let one = record(vec![chunk(3_000, Channel::Content, 3, None)]);
        let f = summarize_record(0, &one, GapChunks::Output, None);
        assert_eq!(value(&f, &rate(1, RateForm::ReciprocalPerUnit), &cx), None);
        assert_eq!(ns_factor(&rate(1, RateForm::ReciprocalPerUnit)), None);
    }
}
