//! The Perfetto timeline: Chrome trace-event JSON (the JSON Object Format) that
//! ui.perfetto.dev and chrome://tracing open. One process per trace, one thread (track) per
//! request with its waiting, prefill and decode slices and an instant per chunk, and counters
//! of requests in flight and output throughput.

pub mod counters;
pub mod events;
mod tracks;

use crate::error::ExportError;
use crate::run::{self, RunColumns};
use events::{Arg, Event, EventWriter};
use serde_json::json;
use std::io::Write;
use std::path::Path;
use tokentrace_analyzer::dataset::Dataset;
use tokentrace_analyzer::facts::RequestFacts;
use tracks::{chunk_events, request_events, Budget};

/// Choices of the timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Chunk instants written at most; whole requests past the budget get none.
    pub max_chunk_events: u64,
    /// Width of a throughput bin, ns.
    pub bin_ns: u64,
    /// Put every trace on one wall-clock time line (from the earliest trace's first send)
    /// instead of starting each at its own first send.
    pub wall_clock: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            max_chunk_events: 250_000,
            bin_ns: 100_000_000,
            wall_clock: false,
        }
    }
}

/// What the timeline holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Written {
    /// Events of every kind.
    pub events: u64,
    /// Chunk instants written.
    pub chunk_events: u64,
    /// Chunks left without an instant by `max_chunk_events`.
    pub chunk_events_dropped: u64,
    /// Requests whose chunks were all left out for the bound.
    pub requests_without_chunk_events: u64,
}

/// Writes the timeline of `dataset` to `path` (refusing an existing file unless `force`),
/// through a `.partial` name renamed when complete.
pub fn export_file(
    dataset: &Dataset,
    path: &Path,
    force: bool,
    options: &Options,
) -> Result<Written, ExportError> {
    run::refuse_existing(path, force)?;
    let partial = run::partial_path(path);
    let written = std::fs::File::create(&partial)
        .map_err(|e| ExportError::io(&partial, e))
        .and_then(|file| export(dataset, std::io::BufWriter::new(file), options, path));
    match written {
        Ok(written) => {
            run::commit(path)?;
            Ok(written)
        }
        Err(err) => {
            let _ = std::fs::remove_file(&partial);
            Err(err)
        }
    }
}

/// Maps a trace's monotonic times onto the timeline: `t - origin + shift` ns.
#[derive(Debug, Clone, Copy)]
struct Clock {
    origin: u64,
    shift: i128,
}

impl Clock {
    fn at(&self, t: u64) -> i64 {
        let v = i128::from(t) - i128::from(self.origin) + self.shift;
        v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }
}

/// Where a trace's time line starts: its first send, or an intended start when earlier (so no
/// waiting slice starts before zero). A trace without requests starts at its anchor.
fn origin(requests: &[RequestFacts]) -> u64 {
    requests
        .iter()
        .map(|r| r.intended_ns.min(r.send_ns))
        .min()
        .unwrap_or(0)
}

/// One clock per trace of `dataset`.
fn clocks(dataset: &Dataset, options: &Options) -> Vec<Clock> {
    let origins: Vec<u64> = (0..dataset.traces.len())
        .map(|t| origin(requests_of(dataset, t)))
        .collect();
    let wall =
        |t: usize| i128::from(dataset.traces[t].header.anchor.realtime_ns) + i128::from(origins[t]);
    let earliest = (0..origins.len()).map(wall).min().unwrap_or(0);
    (0..origins.len())
        .map(|t| Clock {
            origin: origins[t],
            shift: if options.wall_clock {
                wall(t) - earliest
            } else {
                0
            },
        })
        .collect()
}

/// The requests of trace `t` (the dataset orders them by trace, then id).
fn requests_of(dataset: &Dataset, t: usize) -> &[RequestFacts] {
    let start = dataset.requests.partition_point(|r| (r.trace as usize) < t);
    let end = dataset
        .requests
        .partition_point(|r| (r.trace as usize) <= t);
    &dataset.requests[start..end]
}

/// Writes the timeline of `dataset` to `out`; `path` names the output in errors.
pub fn export(
    dataset: &Dataset,
    out: impl Write,
    options: &Options,
    path: &Path,
) -> Result<Written, ExportError> {
    let io = |e: std::io::Error| ExportError::io(path, e);
    let mut w = EventWriter::start(out).map_err(io)?;
    let clocks = clocks(dataset, options);
    let mut budget = Budget::new(options.max_chunk_events);
    let mut traces_meta = Vec::new();
    for (t, trace) in dataset.traces.iter().enumerate() {
        let pid = t as u64 + 1;
        let clock = clocks[t];
        let requests = requests_of(dataset, t);
        let process = |name| Event {
            ph: 'M',
            name,
            cat: "",
            pid,
            tid: 0,
            ts_ns: 0,
            dur_ns: None,
            scope: None,
        };
        w.event(
            &process("process_name"),
            &[("name", Arg::Str(&trace.label))],
        )
        .map_err(io)?;
        w.event(
            &process("process_sort_index"),
            &[("sort_index", Arg::U64(t as u64))],
        )
        .map_err(io)?;
        for r in requests {
            request_events(&mut w, pid, clock, r).map_err(io)?;
        }
        let counter = |name| Event {
            ph: 'C',
            name,
            ..process(name)
        };
        let spans = requests
            .iter()
            .map(|r| (clock.at(r.send_ns), clock.at(r.end_ns)));
        for (ts_ns, n) in counters::in_flight(spans) {
            let e = Event {
                ts_ns,
                ..counter("requests in flight")
            };
            w.event(&e, &[("requests", Arg::U64(n))]).map_err(io)?;
        }
        let throughput = chunk_events(&mut w, trace, pid, clock, options, &mut budget)?;
        for rate in throughput.rates() {
            let e = Event {
                ts_ns: rate.ts_ns,
                ..counter("output throughput")
            };
            let args = [
                ("tokens_per_s", Arg::F64(rate.tokens_per_s)),
                ("chunks_per_s", Arg::F64(rate.chunks_per_s)),
            ];
            w.event(&e, &args).map_err(io)?;
        }
        let columns = RunColumns::of(t, trace);
        traces_meta.push(json!({
            "pid": pid,
            "trace": columns.trace,
            "path": columns.trace_path,
            "run_id": columns.run_id,
            "requests": requests.len(),
            "chunks": trace.chunks,
            "origin_ns": clock.origin,
            "anchor_realtime_ns": trace.header.anchor.realtime_ns,
            "origin_realtime_ns": trace.header.anchor.realtime_ns.saturating_add(clock.origin),
            "offset_ns": i64::try_from(clock.shift).unwrap_or(i64::MAX),
        }));
    }
    let written = Written {
        events: w.events(),
        chunk_events: budget.written,
        chunk_events_dropped: budget.dropped,
        requests_without_chunk_events: budget.requests_dropped,
    };
    let other = json!({
        "exporter": format!("tokentrace {} export perfetto", env!("CARGO_PKG_VERSION")),
        "time_line": if options.wall_clock {
            "wall clock: 0 is the earliest trace's first send (or intended start when earlier)"
        } else {
            "per trace: 0 is the trace's first send (or intended start when earlier)"
        },
        "throughput_bin_ms": options.bin_ns as f64 / 1e6,
        "max_chunk_events": options.max_chunk_events,
        "chunk_events": written.chunk_events,
        "chunk_events_dropped": written.chunk_events_dropped,
        "requests_without_chunk_events": written.requests_without_chunk_events,
        "traces": traces_meta,
    });
    w.finish(&other).map_err(io)?;
    Ok(written)
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_shift_onto_the_line() {
        let c = Clock {
            origin: 1_000,
            shift: 500,
        };
        assert_eq!(c.at(1_000), 500);
        assert_eq!(c.at(0), -500);
        assert_eq!(c.at(u64::MAX), i64::MAX);
    }
}
