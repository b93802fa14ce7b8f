//! Live counters of a run and their display: an indicatif bar on a terminal, plain periodic
//! lines otherwise. Request tasks update atomics once per request (never per chunk).

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Sub-buckets per power of two of the TTFT histogram (about 9% resolution).
const SUB_BUCKETS: usize = 8;
/// Powers of two covered, from 1 µs.
const OCTAVES: usize = 40;

/// Counters shared by the request tasks and the display.
pub struct LiveStats {
    /// Requests finished with outcome ok.
    pub completed: AtomicU64,
    /// Requests finished with any other outcome.
    pub failed: AtomicU64,
    /// Requests sent and not finished.
    pub in_flight: AtomicU64,
    /// Chunks recorded.
    pub chunks: AtomicU64,
    /// Body reads seen.
    pub reads: AtomicU64,
    /// Requests the stream reader sent itself ([`crate::stream::Successor`]).
    pub reader_sent: AtomicU64,
    ttft: Vec<AtomicU64>,
}

impl Default for LiveStats {
    fn default() -> Self {
        LiveStats {
            completed: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            chunks: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            reader_sent: AtomicU64::new(0),
            ttft: (0..SUB_BUCKETS * OCTAVES)
                .map(|_| AtomicU64::new(0))
                .collect(),
        }
    }
}

fn bucket_of(us: u64) -> usize {
    let us = us.max(1);
    let octave = 63 - us.leading_zeros() as usize;
    let frac = if octave >= 3 {
        ((us >> (octave - 3)) & 7) as usize
    } else {
        ((us << (3 - octave)) & 7) as usize
    };
    (octave * SUB_BUCKETS + frac).min(SUB_BUCKETS * OCTAVES - 1)
}

fn bucket_floor_us(bucket: usize) -> u64 {
    let octave = bucket / SUB_BUCKETS;
    let frac = (bucket % SUB_BUCKETS) as u64;
    if octave >= 3 {
        (8 + frac) << (octave - 3)
    } else {
        ((8 + frac) >> (3 - octave)).max(1)
    }
}

impl LiveStats {
    /// Note one TTFT (µs).
    pub fn record_ttft_us(&self, us: u64) {
        self.ttft[bucket_of(us)].fetch_add(1, Ordering::Relaxed);
    }

    /// Approximate TTFT percentile in µs (bucket floor), None before any sample.
    pub fn ttft_percentile_us(&self, p: f64) -> Option<u64> {
        let counts: Vec<u64> = self
            .ttft
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = ((p / 100.0) * total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (bucket, count) in counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Some(bucket_floor_us(bucket));
            }
        }
        None
    }

    fn line(&self, chunks_per_s: f64) -> String {
        let ms = |p| {
            self.ttft_percentile_us(p)
                .map_or("-".to_string(), |us| format!("{:.1}", us as f64 / 1000.0))
        };
        format!(
            "completed {} failed {} in flight {} | {:.0} chunks/s | TTFT p50 {} ms p95 {} ms",
            self.completed.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
            self.in_flight.load(Ordering::Relaxed),
            chunks_per_s,
            ms(50.0),
            ms(95.0),
        )
    }
}

/// Runs the display until `stop` resolves.
pub async fn display(
    stats: Arc<LiveStats>,
    mode: crate::config::ProgressMode,
    total: Option<u64>,
    stop: tokio::sync::oneshot::Receiver<()>,
) {
    use crate::config::ProgressMode;
    let bar = match mode {
        ProgressMode::Off => return,
        ProgressMode::Auto if std::io::stderr().is_terminal() => {
            let bar = match total {
                Some(n) => indicatif::ProgressBar::new(n),
                None => indicatif::ProgressBar::new_spinner(),
            };
            let style =
                indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed} {msg}")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
            bar.set_style(style);
            Some(bar)
        }
        _ => None,
    };
    let period = if bar.is_some() {
        Duration::from_millis(250)
    } else {
        Duration::from_secs(5)
    };
    tokio::pin!(stop);
    // Chunks are counted when their request ends, so the rate is averaged over the whole run
    // rather than a short window (which would jump between zero and bursts).
    let started = Instant::now();
    loop {
        tokio::select! {
            _ = &mut stop => break,
            () = tokio::time::sleep(period) => {}
        }
        let chunks = stats.chunks.load(Ordering::Relaxed);
        let rate = chunks as f64 / started.elapsed().as_secs_f64().max(1e-9);
        let done = stats.completed.load(Ordering::Relaxed) + stats.failed.load(Ordering::Relaxed);
        match &bar {
            Some(bar) => {
                bar.set_position(done);
                bar.set_message(stats.line(rate));
            }
            None => eprintln!("record: {}", stats.line(rate)),
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_land_in_the_right_bucket() {
        let stats = LiveStats::default();
        assert_eq!(stats.ttft_percentile_us(50.0), None);
        for us in 1..=1000u64 {
            stats.record_ttft_us(us * 100);
        }
        let p50 = stats.ttft_percentile_us(50.0).unwrap() as f64;
        let p95 = stats.ttft_percentile_us(95.0).unwrap() as f64;
        assert!((p50 / 50_000.0 - 1.0).abs() < 0.13, "{p50}");
        assert!((p95 / 95_000.0 - 1.0).abs() < 0.13, "{p95}");
    }

    #[test]
    fn bucket_floor_is_at_most_the_value() {
        for us in [1u64, 2, 3, 7, 8, 9, 100, 12345, 1 << 30] {
            assert!(bucket_floor_us(bucket_of(us)) <= us, "{us}");
        }
    }
}
