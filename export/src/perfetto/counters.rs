//! The counter tracks of a timeline: requests in flight and output throughput per time bin.

use std::collections::BTreeMap;

/// Requests in flight at every time the number changes, from each request's (send, end):
/// `(time, requests)` in time order. A request counts from its send to its end; several
/// changes at one instant make one point.
pub fn in_flight(spans: impl IntoIterator<Item = (i64, i64)>) -> Vec<(i64, u64)> {
    let mut changes: Vec<(i64, i64)> = Vec::new();
    for (start, end) in spans {
        changes.push((start, 1));
        changes.push((end.max(start), -1));
    }
    changes.sort_unstable();
    let mut points: Vec<(i64, u64)> = Vec::new();
    let mut level = 0i64;
    let mut i = 0;
    while i < changes.len() {
        let t = changes[i].0;
        while i < changes.len() && changes[i].0 == t {
            level += changes[i].1;
            i += 1;
        }
        let value = level.max(0) as u64;
        if points.last().map_or(0, |p| p.1) != value {
            points.push((t, value));
        }
    }
    points
}

/// Output chunks and their tokens, summed per bin of `bin_ns` on the time line.
#[derive(Debug, Clone)]
pub struct Throughput {
    bin_ns: u64,
    /// Bin index → (tokens of chunks that report a count, chunks). Sparse, so a stray time
    /// far from the rest costs one entry, not a gap's worth of bins.
    bins: BTreeMap<i64, (u64, u64)>,
}

/// One point of the throughput counter: bin start (ns) and rates per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Start of the bin, ns on the time line.
    pub ts_ns: i64,
    /// Output tokens per second (chunks that report a token count).
    pub tokens_per_s: f64,
    /// Output chunks per second.
    pub chunks_per_s: f64,
}

impl Throughput {
    /// Empty bins of `bin_ns` (at least 1 ns).
    pub fn new(bin_ns: u64) -> Throughput {
        Throughput {
            bin_ns: bin_ns.max(1),
            bins: BTreeMap::new(),
        }
    }

    /// Adds one output chunk that arrived at `t` with `tokens` when known.
    pub fn add(&mut self, t: i64, tokens: Option<u32>) {
        let bin = t.div_euclid(i64::try_from(self.bin_ns).unwrap_or(i64::MAX));
        let entry = self.bins.entry(bin).or_default();
        entry.0 += u64::from(tokens.unwrap_or(0));
        entry.1 += 1;
    }

    /// The counter's points: one per non-empty bin, and a zero where the output stops (after
    /// a non-empty bin whose successor is empty), so the step line drops between bursts.
    pub fn rates(&self) -> Vec<Rate> {
        let seconds = self.bin_ns as f64 / 1e9;
        let start = |bin: i64| bin.saturating_mul(self.bin_ns as i64);
        let mut out = Vec::with_capacity(self.bins.len() + 1);
        let mut bins = self.bins.iter().peekable();
        while let Some((&bin, &(tokens, chunks))) = bins.next() {
            out.push(Rate {
                ts_ns: start(bin),
                tokens_per_s: tokens as f64 / seconds,
                chunks_per_s: chunks as f64 / seconds,
            });
            if bins.peek().map(|(&next, _)| next) != Some(bin + 1) {
                out.push(Rate {
                    ts_ns: start(bin + 1),
                    tokens_per_s: 0.0,
                    chunks_per_s: 0.0,
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_flight_steps_at_sends_and_ends() {
        let points = in_flight([(0, 10), (5, 20), (10, 15), (30, 30)]);
        // At 10 one request ends and one starts: one point, unchanged value, so none.
        assert_eq!(points, vec![(0, 1), (5, 2), (15, 1), (20, 0)]);
        assert!(in_flight(Vec::new()).is_empty());
        // An end before its send counts as a zero-length request: the count never moves.
        assert_eq!(in_flight([(10, 4)]), Vec::<(i64, u64)>::new());
    }

    #[test]
    fn throughput_bins_rates_and_drops_to_zero_between_bursts() {
        let mut t = Throughput::new(100_000_000);
        t.add(10, Some(2));
        t.add(99_999_999, Some(3));
        t.add(100_000_000, None);
        t.add(500_000_000, Some(1));
        let rates = t.rates();
        let points: Vec<(i64, f64, f64)> = rates
            .iter()
            .map(|r| (r.ts_ns, r.tokens_per_s, r.chunks_per_s))
            .collect();
        assert_eq!(
            points,
            vec![
                (0, 50.0, 20.0),
                (100_000_000, 0.0, 10.0),
                (200_000_000, 0.0, 0.0),
                (500_000_000, 10.0, 10.0),
                (600_000_000, 0.0, 0.0),
            ]
        );
    }
}
