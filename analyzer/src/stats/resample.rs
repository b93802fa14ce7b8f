//! Seeded resampling: a version-stable generator, the percentile bootstrap, and thinning of
//! samples too large to resample.

use super::{percentile, sort, PercentileMethod};

/// SplitMix64: a tiny generator whose output never changes between library versions, so a
/// seeded bootstrap gives the same interval forever.
#[derive(Debug, Clone)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform index below `n` (multiply-shift; the bias is below 2^-40 for any sample
    /// size we resample).
    pub fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }
}

/// Percentile-bootstrap confidence interval of `statistic` (which gets an unsorted resample)
/// over `values`; None when there are no values or no resamples.
pub fn bootstrap_ci(
    values: &[f64],
    statistic: &dyn Fn(&mut [f64]) -> Option<f64>,
    resamples: usize,
    confidence: f64,
    seed: u64,
) -> Option<(f64, f64)> {
    if values.is_empty() || resamples == 0 {
        return None;
    }
    let mut rng = SplitMix64(seed);
    let mut sample = vec![0.0; values.len()];
    let mut estimates = Vec::with_capacity(resamples);
    for _ in 0..resamples {
        for v in sample.iter_mut() {
            *v = values[rng.below(values.len())];
        }
        if let Some(e) = statistic(&mut sample) {
            estimates.push(e);
        }
    }
    sort(&mut estimates);
    let tail = (1.0 - confidence) / 2.0 * 100.0;
    Some((
        percentile(&estimates, tail, PercentileMethod::Linear)?,
        percentile(&estimates, 100.0 - tail, PercentileMethod::Linear)?,
    ))
}

/// Every k-th value of a sorted sample, so that at most `max` remain (quantiles are kept);
/// bootstrapping hundreds of millions of pooled gaps is not affordable.
pub fn thin(sorted: &[f64], max: usize) -> Vec<f64> {
    if sorted.len() <= max || max == 0 {
        return sorted.to_vec();
    }
    let step = sorted.len() as f64 / max as f64;
    (0..max)
        .map(|i| sorted[(i as f64 * step) as usize])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{mean, Summation};

    #[test]
    fn bootstrap_interval_covers_the_mean_and_is_reproducible() {
        let v: Vec<f64> = (0..500).map(|i| f64::from(i % 50)).collect();
        let mean = |s: &mut [f64]| mean(s, Summation::Naive);
        let ci = bootstrap_ci(&v, &mean, 500, 0.95, 7).unwrap();
        assert!(ci.0 < 24.5 && 24.5 < ci.1 && ci.1 - ci.0 < 5.0, "{ci:?}");
        assert_eq!(bootstrap_ci(&v, &mean, 500, 0.95, 7), Some(ci));
        assert_eq!(bootstrap_ci(&[], &mean, 500, 0.95, 7), None);
    }

    #[test]
    fn thinning_keeps_the_range() {
        let v: Vec<f64> = (0..100).map(f64::from).collect();
        let t = thin(&v, 10);
        assert_eq!(t.len(), 10);
        assert_eq!((t[0], t[9]), (0.0, 90.0));
        assert_eq!(thin(&v, 1000).len(), 100);
    }
}
