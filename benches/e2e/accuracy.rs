//! Timestamp accuracy: the simulator's truth log (when it handed each SSE event to the
//! connection) joined with a client's arrival time of the same event, on request id and event
//! index. Both sides count every event of a response from 0 — role, token deltas, usage and
//! `[DONE]` — so index k on one side is index k on the other.

use std::collections::HashMap;
use std::io;
use std::path::Path;

/// Truth log: request id → write time (absolute CLOCK_MONOTONIC ns) of each event, by index.
pub type Truth = HashMap<u64, Vec<u64>>;

/// Load a truth log (`{"request_id":"7","chunk_index":3,"mono_ns":123}` per line; the id is a
/// number or the recorder's request UUID). Lines whose request id is neither are skipped.
pub fn load_truth(path: &Path) -> io::Result<Truth> {
    let text = std::fs::read(path)?;
    let mut truth: Truth = HashMap::new();
    for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let (Some(id), Some(index), Some(mono)) = (
            request_id(line),
            field(line, b"\"chunk_index\":"),
            field(line, b"\"mono_ns\":"),
        ) else {
            continue;
        };
        let slots = truth.entry(id).or_default();
        let index = index as usize;
        if slots.len() <= index {
            slots.resize(index + 1, 0);
        }
        slots[index] = mono;
    }
    Ok(truth)
}

/// Truth log keyed by the request id exactly as the server logged it (a peer's own
/// `X-Request-ID`, such as AIPerf's random UUIDs).
pub type NamedTruth = HashMap<String, Vec<u64>>;

/// Load a truth log keyed by the logged request id string.
pub fn load_truth_named(path: &Path) -> io::Result<NamedTruth> {
    let text = std::fs::read(path)?;
    let mut truth: NamedTruth = HashMap::new();
    for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let (Some(id), Some(index), Some(mono)) = (
            request_id_text(line),
            field(line, b"\"chunk_index\":"),
            field(line, b"\"mono_ns\":"),
        ) else {
            continue;
        };
        let slots = truth.entry(id.to_string()).or_default();
        let index = index as usize;
        if slots.len() <= index {
            slots.resize(index + 1, 0);
        }
        slots[index] = mono;
    }
    Ok(truth)
}

/// The request id string of a truth-log line.
fn request_id_text(line: &[u8]) -> Option<&str> {
    let key = b"\"request_id\":\"";
    let at = memchr::memmem::find(line, key)? + key.len();
    let end = at + memchr::memchr(b'"', &line[at..])?;
    std::str::from_utf8(&line[at..end]).ok()
}

/// The request id of a truth-log line: a decimal id, or the id inside the recorder's UUID.
fn request_id(line: &[u8]) -> Option<u64> {
    let text = request_id_text(line)?;
    text.parse()
        .ok()
        .or_else(|| tokentrace_format::request_id::id_of_uuid(text))
}

/// The decimal number right after `key` in `line`.
fn field(line: &[u8], key: &[u8]) -> Option<u64> {
    let at = memchr::memmem::find(line, key)? + key.len();
    let digits = line[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&line[at..at + digits])
        .ok()?
        .parse()
        .ok()
}

/// Per-event errors (client arrival − server write, ns) and join bookkeeping.
#[derive(Default)]
pub struct Join {
    /// One error per joined event.
    pub errors_ns: Vec<i64>,
    /// Client events without a truth entry (or a request id the truth log lacks).
    pub unmatched: u64,
    /// Requests whose event count differs from the truth log's.
    pub count_mismatches: u64,
}

impl Join {
    /// Join one response: `arrivals` are absolute CLOCK_MONOTONIC ns, one per event in order.
    pub fn add(&mut self, truth: &Truth, id: u64, arrivals: impl ExactSizeIterator<Item = u64>) {
        self.add_written(truth.get(&id).map(Vec::as_slice), arrivals);
    }

    /// Join one response with its truth entry (`None`: the truth log lacks the request).
    pub fn add_written(
        &mut self,
        written: Option<&[u64]>,
        arrivals: impl ExactSizeIterator<Item = u64>,
    ) {
        let Some(written) = written else {
            self.unmatched += arrivals.len() as u64;
            return;
        };
        if written.len() != arrivals.len() {
            self.count_mismatches += 1;
        }
        for (k, arrival) in arrivals.enumerate() {
            match written.get(k) {
                Some(&w) if w != 0 => self.errors_ns.push(arrival as i64 - w as i64),
                _ => self.unmatched += 1,
            }
        }
    }

    /// Join the events of one response picked by `keep` (their index in the response), for a
    /// distribution over part of the events; the join's bookkeeping is left to [`Join::add`].
    pub fn add_some(
        &mut self,
        truth: &Truth,
        id: u64,
        arrivals: impl Iterator<Item = u64>,
        mut keep: impl FnMut(usize) -> bool,
    ) {
        let Some(written) = truth.get(&id) else {
            return;
        };
        for (k, arrival) in arrivals.enumerate() {
            if let Some(&w) = written.get(k).filter(|&&w| w != 0 && keep(k)) {
                self.errors_ns.push(arrival as i64 - w as i64);
            }
        }
    }

    /// p50, p99, p99.9 and max (nearest rank), in ns.
    pub fn percentiles(&mut self) -> Option<Percentiles> {
        if self.errors_ns.is_empty() {
            return None;
        }
        self.errors_ns.sort_unstable();
        let v = &self.errors_ns;
        let rank = |p: f64| {
            let k = ((p / 100.0) * v.len() as f64).ceil() as usize;
            v[k.clamp(1, v.len()) - 1]
        };
        Some(Percentiles {
            p50: rank(50.0),
            p99: rank(99.0),
            p999: rank(99.9),
            max: v[v.len() - 1],
            min: v[0],
        })
    }
}

/// Events of one response that the client read together with an event the server wrote at
/// least `gap_ns` later (`read_index`: each event's read, as the trace has it). The kernel
/// stamps a read with its last segment's receive time and merges segments that wait in the
/// receive queue, so each such event carries that later write's time: these are the events
/// the client read late, not ones the server wrote together.
pub fn waited_for_later_write(written: &[u64], read_index: &[u32], gap_ns: u64) -> u64 {
    let mut waited = 0;
    let mut end = read_index.len();
    for k in (0..read_index.len()).rev() {
        if read_index.get(k + 1) != Some(&read_index[k]) {
            end = k;
        }
        let (Some(&w), Some(&last)) = (written.get(k), written.get(end)) else {
            continue;
        };
        if w != 0 && last.saturating_sub(w) >= gap_ns {
            waited += 1;
        }
    }
    waited
}

/// Timestamp error distribution, ns.
#[derive(Clone, Copy, Debug)]
pub struct Percentiles {
    /// Median.
    pub p50: i64,
    /// 99th percentile.
    pub p99: i64,
    /// 99.9th percentile.
    pub p999: i64,
    /// Largest.
    pub max: i64,
    /// Smallest (negative would mean the client stamped before the server wrote: a bug).
    pub min: i64,
}

/// Check the join on a tiny hand-made case. `cargo test --benches` runs the bench binary
/// without `--bench`; this is what it checks then (a harness-less bench has no `#[test]`).
pub fn self_check(dir: &Path) -> io::Result<()> {
    let path = dir.join("truth-self-check.jsonl");
    std::fs::write(
        &path,
        "{\"request_id\":\"3\",\"chunk_index\":0,\"mono_ns\":100}\n\
         {\"request_id\":\"3\",\"chunk_index\":1,\"mono_ns\":200}\n\
         {\"request_id\":\"probe\",\"chunk_index\":0,\"mono_ns\":5}\n",
    )?;
    let truth = load_truth(&path)?;
    let mut join = Join::default();
    join.add(&truth, 3, [150u64, 260, 300].into_iter());
    join.add(&truth, 9, [1u64].into_iter());
    assert_eq!(join.errors_ns, vec![50, 60]);
    assert_eq!(join.unmatched, 2);
    assert_eq!(join.count_mismatches, 1);
    let mut some = Join::default();
    some.add_some(&truth, 3, [150u64, 260, 300].into_iter(), |k| k != 0);
    some.add_some(&truth, 9, [1u64].into_iter(), |_| true);
    assert_eq!(some.errors_ns, vec![60]);
    // Reads [0 0 0] [1] [2 2]: event 0 waited 300 ns for event 2, event 1 only 50 ns; event 4
    // waited 500 ns for event 5.
    let written = [100, 350, 400, 450, 500, 1000];
    assert_eq!(
        waited_for_later_write(&written, &[0, 0, 0, 1, 2, 2], 100),
        2
    );
    assert_eq!(
        waited_for_later_write(&written, &[0, 0, 0, 1, 2, 2], 400),
        1
    );
    assert_eq!(waited_for_later_write(&written, &[0, 1, 2, 3, 4, 5], 1), 0);
    let p = join
        .percentiles()
        .ok_or_else(|| io::Error::other("no errors"))?;
    assert_eq!((p.p50, p.p99, p.max, p.min), (50, 60, 60, 50));
    let named = load_truth_named(&path)?;
    assert_eq!(named.get("3").map(Vec::as_slice), Some(&[100u64, 200][..]));
    assert_eq!(named.get("probe").map(Vec::as_slice), Some(&[5u64][..]));
    Ok(())
}
