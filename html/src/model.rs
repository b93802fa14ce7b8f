//! What the panels draw, taken from an analysis and its trace: per-concept samples, timeline
//! rows and per-bin counts over the run, each bounded in size whatever the run's.

use crate::HtmlError;
use tokentrace_analyzer::analysis::Analysis;
use tokentrace_analyzer::facts::RequestFacts;
use tokentrace_analyzer::protocol::Concept;
use tokentrace_analyzer::summary::Rows;
use tokentrace_format::{DecodedBlock, TraceReader};

/// Timeline rows kept per run; beyond it requests are sampled evenly in send order.
pub const TIMELINE_ROWS: usize = 3000;
/// Bins of the over-time charts.
pub const TIME_BINS: usize = 120;

/// The samples of one distribution panel.
#[derive(Debug, Clone)]
pub struct Samples {
    /// The metric's name under the protocol (or what the raw trace gives when it has none).
    pub source: String,
    /// The unit of the values.
    pub unit: String,
    /// The values, one per counted request (per gap for ITL), sorted ascending.
    pub values: Vec<f64>,
}

/// The samples of `concept` under the analysis's protocol: the metric tagged with it, pooled
/// per gap where the metric pools. ITL falls back to the raw gaps between output chunks when
/// the protocol defines none (the trace always has them).
pub fn samples(analysis: &Analysis<'_>, concept: Concept) -> Option<Samples> {
    let protocol = analysis.protocol;
    if let Some(m) = protocol
        .metrics
        .iter()
        .position(|def| def.concept == Some(concept))
    {
        let mut values = Vec::with_capacity(analysis.len());
        for i in 0..analysis.len() {
            analysis.pooled(i, m, &mut values);
        }
        values.retain(|v| v.is_finite());
        values.sort_unstable_by(f64::total_cmp);
        return Some(Samples {
            source: protocol.metrics[m].name.clone(),
            unit: protocol.metrics[m].unit.clone(),
            values,
        });
    }
    if concept != Concept::Itl {
        return None;
    }
    let gaps = &analysis.dataset.gaps;
    let mut values: Vec<f64> = (0..analysis.len())
        .flat_map(|i| analysis.request(i).gaps(gaps))
        .map(|&ns| ns as f64 / 1e6)
        .collect();
    values.sort_unstable_by(f64::total_cmp);
    (!values.is_empty()).then(|| Samples {
        source: "gaps between output chunks (raw trace)".into(),
        unit: "ms".into(),
        values,
    })
}

/// One timeline row, in ms from the run's first send.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Row {
    /// Request id.
    pub id: u64,
    /// Intended start.
    pub intended: f64,
    /// Send.
    pub send: f64,
    /// First output delta.
    pub first_output: Option<f64>,
    /// First content delta.
    pub first_content: Option<f64>,
    /// End of the response.
    pub end: f64,
    /// Whether the request failed.
    pub failed: bool,
}

/// The requests of one trace of the analysis (every phase), in send order.
fn requests_of<'d>(analysis: &'d Analysis<'_>, trace: u32) -> Vec<&'d RequestFacts> {
    let mut rows: Vec<&RequestFacts> = analysis
        .dataset
        .requests
        .iter()
        .filter(|r| r.trace == trace)
        .collect();
    rows.sort_by_key(|r| (r.send_ns, r.id));
    rows
}

/// The first send of a trace, the origin of its times.
pub fn origin_ns(analysis: &Analysis<'_>, trace: u32) -> u64 {
    requests_of(analysis, trace)
        .iter()
        .map(|r| r.send_ns.min(r.intended_ns))
        .min()
        .unwrap_or(0)
}

/// Timeline rows of one trace, at most [`TIMELINE_ROWS`], and how many requests it has.
pub fn timeline(analysis: &Analysis<'_>, trace: u32) -> (Vec<Row>, usize) {
    let all = requests_of(analysis, trace);
    let origin = origin_ns(analysis, trace);
    let ms = |ns: u64| (ns as f64 - origin as f64) / 1e6;
    let step = all.len().div_ceil(TIMELINE_ROWS).max(1);
    let rows = all
        .iter()
        .step_by(step)
        .map(|r| Row {
            id: r.id,
            intended: ms(r.intended_ns),
            send: ms(r.send_ns),
            first_output: r.first_output_ns.map(ms),
            first_content: r.first_content_ns.map(ms),
            end: ms(r.end_ns.max(r.send_ns)),
            failed: !r.is_ok(),
        })
        .collect();
    (rows, all.len())
}

/// Counts over the run in equal bins of `bin_s` seconds from the first send.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OverTime {
    /// Bin width, seconds.
    pub bin_s: f64,
    /// Output chunks arrived per second, per bin.
    pub output_chunks_per_s: Vec<f64>,
    /// Requests in flight, averaged over each bin.
    pub in_flight: Vec<f64>,
    /// Requests that ended failed, per bin.
    pub errors: Vec<f64>,
    /// Requests that ended successfully, per second, per bin.
    pub completions_per_s: Vec<f64>,
}

/// The over-time series of one trace; output chunks are read from the trace itself, so the
/// throughput is the arrival of every streamed output chunk on the recorder's clock.
pub fn over_time(analysis: &Analysis<'_>, trace: u32) -> Result<OverTime, HtmlError> {
    let requests = requests_of(analysis, trace);
    let origin = origin_ns(analysis, trace);
    let last = requests.iter().map(|r| r.end_ns).max().unwrap_or(origin);
    let span_ns = last.saturating_sub(origin).max(1);
    let bin_ns = span_ns.div_ceil(TIME_BINS as u64).max(1);
    let bins = span_ns.div_ceil(bin_ns) as usize;
    let bin_s = bin_ns as f64 / 1e9;
    let index = |ns: u64| ((ns.saturating_sub(origin) / bin_ns) as usize).min(bins - 1);
    let mut out = OverTime {
        bin_s,
        output_chunks_per_s: vec![0.0; bins],
        in_flight: vec![0.0; bins],
        errors: vec![0.0; bins],
        completions_per_s: vec![0.0; bins],
    };
    for r in &requests {
        // Time-weighted occupancy: the share of each bin the request was in flight.
        let (start, end) = (r.send_ns.max(origin), r.end_ns.max(r.send_ns));
        let (first, last_bin) = (index(start), index(end));
        for (b, slot) in out.in_flight[first..=last_bin].iter_mut().enumerate() {
            let bin_start = origin + (first + b) as u64 * bin_ns;
            let overlap = end
                .min(bin_start + bin_ns)
                .saturating_sub(start.max(bin_start));
            *slot += overlap as f64 / bin_ns as f64;
        }
        if r.is_ok() {
            out.completions_per_s[last_bin] += 1.0 / bin_s;
        } else {
            out.errors[last_bin] += 1.0;
        }
    }
    let path = &analysis.dataset.traces[trace as usize].path;
    let reader = TraceReader::open(path).map_err(|source| HtmlError::Trace {
        path: path.clone(),
        source,
    })?;
    let mut block = DecodedBlock::default();
    for b in 0..reader.block_count() {
        // A block that does not decode was already reported by the analysis that loaded it.
        if reader.decode_block_into(b, &mut block).is_err() {
            continue;
        }
        let c = &block.chunks;
        for ((&at, &channel), &text_len) in c.arrival_ns.iter().zip(&c.channel).zip(&c.text_len) {
            if channel.is_output_text(text_len) {
                out.output_chunks_per_s[index(at)] += 1.0 / bin_s;
            }
        }
    }
    Ok(out)
}
