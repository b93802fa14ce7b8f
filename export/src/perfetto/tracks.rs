//! The tracks of one trace: each request's name and slices, and its chunk instants within the
//! export's bound.

use super::counters::Throughput;
use super::events::{Arg, Event, EventWriter};
use super::{Clock, Options};
use crate::error::ExportError;
use crate::walk;
use std::io::Write;
use tokentrace_analyzer::dataset::TraceInfo;
use tokentrace_analyzer::facts::{is_output, RequestFacts};
use tokentrace_format::Outcome;

/// The thread of request `id`: ids from 1, as 0 names no thread in some viewers.
pub(super) fn tid(id: u64) -> u64 {
    id.saturating_add(1)
}

/// The track of one request: its name and the waiting, prefill and decode slices. A request
/// that did not end `ok` has its last slice named after the outcome, in category `failed`.
pub(super) fn request_events<W: Write>(
    w: &mut EventWriter<W>,
    pid: u64,
    clock: Clock,
    r: &RequestFacts,
) -> std::io::Result<()> {
    let tid = tid(r.id);
    let meta = Event {
        ph: 'M',
        name: "thread_name",
        cat: "",
        pid,
        tid,
        ts_ns: 0,
        dur_ns: None,
        scope: None,
    };
    w.event(&meta, &[("name", Arg::Str(&format!("request {}", r.id)))])?;
    let sort = Event {
        name: "thread_sort_index",
        ..meta
    };
    w.event(&sort, &[("sort_index", Arg::U64(r.id))])?;
    let failed = r.outcome != Outcome::Ok;
    let phase = format!("{:?}", r.phase).to_lowercase();
    let common = [
        ("id", Arg::U64(r.id)),
        ("phase", Arg::Str(&phase)),
        ("trial", Arg::U64(u64::from(r.trial))),
        ("outcome", Arg::Str(r.outcome.name())),
        ("http_status", Arg::U64(u64::from(r.http_status))),
        ("error", r.error.as_deref().map_or(Arg::Null, Arg::Str)),
    ];
    let slice = |name, from: u64, to: u64, failed: bool| Event {
        ph: 'X',
        name,
        cat: if failed { "failed" } else { "request" },
        pid,
        tid,
        ts_ns: clock.at(from),
        dur_ns: Some(to.saturating_sub(from)),
        scope: None,
    };
    w.event(&slice("waiting", r.intended_ns, r.send_ns, false), &common)?;
    let marked = |stage: &str| {
        if failed {
            format!("{stage} ({})", r.outcome.name())
        } else {
            stage.to_string()
        }
    };
    match r.first_output_ns {
        Some(first) => {
            w.event(&slice("prefill", r.send_ns, first, false), &common)?;
            let mut args = common.to_vec();
            args.push(("output_chunks", Arg::U64(u64::from(r.output_chunks()))));
            let tokens = r.usage.completion_tokens.map(u64::from);
            args.push(("completion_tokens", tokens.map_or(Arg::Null, Arg::U64)));
            let name = marked("decode");
            w.event(&slice(&name, first, r.end_ns, failed), &args)
        }
        None => {
            let name = marked("prefill");
            w.event(&slice(&name, r.send_ns, r.end_ns, failed), &common)
        }
    }
}

/// How many chunk instants may still be written. Requests are kept or left out whole, in file
/// order; once one does not fit, no later request gets instants, so what is left out is
/// always "every request after this point".
#[derive(Debug, Clone, Copy)]
pub(super) struct Budget {
    left: u64,
    open: bool,
    /// Chunk instants written.
    pub(super) written: u64,
    /// Chunks left without an instant.
    pub(super) dropped: u64,
    /// Requests left without instants.
    pub(super) requests_dropped: u64,
}

impl Budget {
    pub(super) fn new(max: u64) -> Budget {
        Budget {
            left: max,
            open: true,
            written: 0,
            dropped: 0,
            requests_dropped: 0,
        }
    }

    /// Whether a request of `chunks` chunks gets its instants (and accounts for it).
    fn take(&mut self, chunks: u64) -> bool {
        if self.open && chunks <= self.left {
            self.left -= chunks;
            self.written += chunks;
            return true;
        }
        self.open = false;
        if chunks > 0 {
            self.dropped += chunks;
            self.requests_dropped += 1;
        }
        false
    }
}

/// Reads the trace's chunks block by block ([`walk::blocks`]): an instant per chunk while the
/// budget lasts, and every output chunk into the throughput bins.
pub(super) fn chunk_events<W: Write>(
    w: &mut EventWriter<W>,
    trace: &TraceInfo,
    pid: u64,
    clock: Clock,
    options: &Options,
    budget: &mut Budget,
) -> Result<Throughput, ExportError> {
    let mut throughput = Throughput::new(options.bin_ns);
    let io = |e| ExportError::io(&trace.path, e);
    walk::blocks(&trace.path, |block| {
        let c = &block.chunks;
        let n = walk::chunk_count(c);
        for request in &block.requests {
            let range = request.chunk_range();
            if range.end > n {
                continue;
            }
            let instants = budget.take(range.len() as u64);
            let tid = tid(request.meta.id);
            for (index, i) in range.enumerate() {
                let ts_ns = clock.at(c.arrival_ns[i]);
                if is_output(c.channel[i], c.text_len[i]) {
                    throughput.add(ts_ns, c.tokens[i]);
                }
                if !instants {
                    continue;
                }
                let e = Event {
                    ph: 'i',
                    name: c.channel[i].name(),
                    cat: "chunk",
                    pid,
                    tid,
                    ts_ns,
                    dur_ns: None,
                    scope: Some('t'),
                };
                let tokens = c.tokens[i].map_or(Arg::Null, |t| Arg::U64(u64::from(t)));
                let args = [
                    ("index", Arg::U64(index as u64)),
                    ("read_index", Arg::U64(u64::from(c.read_index[i]))),
                    ("bytes", Arg::U64(u64::from(c.bytes[i]))),
                    ("text_len", Arg::U64(u64::from(c.text_len[i]))),
                    ("tokens", tokens),
                ];
                w.event(&e, &args).map_err(io)?;
            }
        }
        Ok(())
    })?;
    Ok(throughput)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_keeps_whole_requests_then_stops() {
        let mut b = Budget::new(10);
        assert!(b.take(4));
        assert!(b.take(6));
        assert!(!b.take(1));
        // Room is left for none after the first refusal, however small the request.
        assert!(!b.take(0));
        assert!(!b.take(3));
        assert_eq!((b.written, b.dropped, b.requests_dropped), (10, 4, 2));
        let mut none = Budget::new(0);
        assert!(none.take(0));
        assert!(!none.take(2));
    }
}
