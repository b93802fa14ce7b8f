//! Summary statistics with the exact arithmetic of the tools whose numbers we reproduce.
//!
//! Percentiles come in every method numpy offers plus nearest rank; sums come naive (Python's
//! `sum`) or pairwise (numpy's `add.reduce`), because a mean printed to the last bit depends on
//! the order of additions.

use serde::{Deserialize, Serialize};

/// How a percentile is read off sorted values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PercentileMethod {
    /// k = ceil(p/100 * n), 1-based, on sorted values (no interpolation).
    NearestRank,
    /// numpy `linear` (the default; H&F 7): virtual index (n-1)q, interpolated.
    Linear,
    /// numpy `lower`: floor of (n-1)q.
    Lower,
    /// numpy `higher`: ceil of (n-1)q.
    Higher,
    /// numpy `midpoint`: mean of `lower` and `higher`.
    Midpoint,
    /// numpy `nearest`: (n-1)q rounded half to even.
    Nearest,
    /// numpy `inverted_cdf` (H&F 1).
    InvertedCdf,
    /// numpy `averaged_inverted_cdf` (H&F 2).
    AveragedInvertedCdf,
    /// numpy `closest_observation` (H&F 3).
    ClosestObservation,
    /// numpy `interpolated_inverted_cdf` (H&F 4).
    InterpolatedInvertedCdf,
    /// numpy `hazen` (H&F 5).
    Hazen,
    /// numpy `weibull` (H&F 6).
    Weibull,
    /// numpy `median_unbiased` (H&F 8).
    MedianUnbiased,
    /// numpy `normal_unbiased` (H&F 9).
    NormalUnbiased,
    /// Weighted inverse CDF without interpolation (GuideLLM): probabilities w/Σw summed in
    /// order, the first value whose cumulative probability reaches q. Unit weights unless the
    /// metric gives one.
    CdfSearch,
}

impl PercentileMethod {
    /// Every method, for listings and parsing.
    pub const ALL: [PercentileMethod; 15] = [
        PercentileMethod::NearestRank,
        PercentileMethod::Linear,
        PercentileMethod::Lower,
        PercentileMethod::Higher,
        PercentileMethod::Midpoint,
        PercentileMethod::Nearest,
        PercentileMethod::InvertedCdf,
        PercentileMethod::AveragedInvertedCdf,
        PercentileMethod::ClosestObservation,
        PercentileMethod::InterpolatedInvertedCdf,
        PercentileMethod::Hazen,
        PercentileMethod::Weibull,
        PercentileMethod::MedianUnbiased,
        PercentileMethod::NormalUnbiased,
        PercentileMethod::CdfSearch,
    ];

    /// The snake_case name used in protocol files and reports.
    pub fn name(self) -> &'static str {
        match self {
            PercentileMethod::NearestRank => "nearest_rank",
            PercentileMethod::Linear => "linear",
            PercentileMethod::Lower => "lower",
            PercentileMethod::Higher => "higher",
            PercentileMethod::Midpoint => "midpoint",
            PercentileMethod::Nearest => "nearest",
            PercentileMethod::InvertedCdf => "inverted_cdf",
            PercentileMethod::AveragedInvertedCdf => "averaged_inverted_cdf",
            PercentileMethod::ClosestObservation => "closest_observation",
            PercentileMethod::InterpolatedInvertedCdf => "interpolated_inverted_cdf",
            PercentileMethod::Hazen => "hazen",
            PercentileMethod::Weibull => "weibull",
            PercentileMethod::MedianUnbiased => "median_unbiased",
            PercentileMethod::NormalUnbiased => "normal_unbiased",
            PercentileMethod::CdfSearch => "cdf_search",
        }
    }

    /// Looks a method up by [`PercentileMethod::name`].
    pub fn from_name(name: &str) -> Option<PercentileMethod> {
        PercentileMethod::ALL.into_iter().find(|m| m.name() == name)
    }

    /// How the method reads in a methodology sentence.
    pub fn describe(self) -> String {
        match self {
            PercentileMethod::NearestRank => "the nearest-rank percentile method".to_string(),
            PercentileMethod::Linear => {
                "numpy linear interpolation (numpy.percentile default)".to_string()
            }
            PercentileMethod::CdfSearch => "the weighted inverse CDF without interpolation (the first value whose cumulative weight share reaches the percentile)".to_string(),
            other => format!("numpy.percentile method '{}'", other.name()),
        }
    }
}

/// How values are added up for a mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Summation {
    /// Left to right in request order (a running sum, as AIPerf keeps).
    Naive,
    /// Correctly rounded, as Python's `math.fsum` and `statistics.fmean` (and, but for rare
    /// ties, Python 3.12+ `sum`, which compensates).
    Exact,
    /// numpy's pairwise summation (`np.mean`, `np.sum`, `np.std`).
    Pairwise,
}

/// Whether a standard deviation divides by n or n - 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StdKind {
    /// Divide by n (`np.std` default, ddof=0).
    Population,
    /// Divide by n - 1 (`statistics.stdev`, ddof=1).
    Sample,
}

/// Adds `values` with the given method.
pub fn sum(values: &[f64], method: Summation) -> f64 {
    match method {
        Summation::Naive => values.iter().fold(0.0, |acc, v| acc + v),
        Summation::Exact => exact_sum(values),
        Summation::Pairwise => pairwise_sum(values),
    }
}

/// Shewchuk's exact summation with the final round-half-even step, as CPython's `math.fsum`
/// (Modules/mathmodule.c). Finite inputs only; per-request values always are.
fn exact_sum(values: &[f64]) -> f64 {
    let mut partials: Vec<f64> = Vec::new();
    for &value in values {
        let mut x = value;
        let mut kept = 0;
        for j in 0..partials.len() {
            let mut y = partials[j];
            if x.abs() < y.abs() {
                std::mem::swap(&mut x, &mut y);
            }
            let hi = x + y;
            let lo = y - (hi - x);
            if lo != 0.0 {
                partials[kept] = lo;
                kept += 1;
            }
            x = hi;
        }
        partials.truncate(kept);
        partials.push(x);
    }
    let Some(mut n) = partials.len().checked_sub(1) else {
        return 0.0;
    };
    let mut hi = partials[n];
    let mut lo = 0.0;
    while n > 0 {
        let x = hi;
        n -= 1;
        let y = partials[n];
        hi = x + y;
        let yr = hi - x;
        lo = y - yr;
        if lo != 0.0 {
            break;
        }
    }
    // Round half to even across the remaining partials: if the next partial has the same
    // sign as the rounding error, the true sum is beyond the halfway point.
    if n > 0 && ((lo < 0.0 && partials[n - 1] < 0.0) || (lo > 0.0 && partials[n - 1] > 0.0)) {
        let y = lo * 2.0;
        let x = hi + y;
        if y == x - hi {
            hi = x;
        }
    }
    hi
}

/// numpy's `pairwise_sum` (numpy/_core/src/umath/loops_utils.h.src), block size 128, unrolled by 8.
fn pairwise_sum(a: &[f64]) -> f64 {
    let n = a.len();
    if n < 8 {
        // numpy starts this loop from -0.0 so that an all-negative-zero input stays -0.0.
        a.iter().fold(-0.0, |acc, v| acc + v)
    } else if n <= 128 {
        let mut r = [0.0f64; 8];
        r.copy_from_slice(&a[..8]);
        let mut i = 8;
        while i < n - (n % 8) {
            for (j, acc) in r.iter_mut().enumerate() {
                *acc += a[i + j];
            }
            i += 8;
        }
        let mut res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for v in &a[i..] {
            res += v;
        }
        res
    } else {
        let mut n2 = n / 2;
        n2 -= n2 % 8;
        pairwise_sum(&a[..n2]) + pairwise_sum(&a[n2..])
    }
}

/// Arithmetic mean; None for no values.
pub fn mean(values: &[f64], method: Summation) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    Some(sum(values, method) / values.len() as f64)
}

/// Standard deviation (numpy's two-pass formula); None when undefined for `kind`.
pub fn std_dev(values: &[f64], kind: StdKind, method: Summation) -> Option<f64> {
    let n = values.len();
    let ddof = match kind {
        StdKind::Population => 0,
        StdKind::Sample => 1,
    };
    if n <= ddof {
        return None;
    }
    let m = mean(values, method)?;
    let squares: Vec<f64> = values.iter().map(|v| (v - m) * (v - m)).collect();
    Some((sum(&squares, method) / (n - ddof) as f64).sqrt())
}

/// Sorts samples for percentile reads (NaN last; per-request values are finite or absent).
/// Unstable: equal values are interchangeable.
pub fn sort(values: &mut [f64]) {
    values.sort_unstable_by(|a, b| a.total_cmp(b));
}

/// The `p`-th percentile (0..=100) of ascending `sorted` values; None for no values.
pub fn percentile(sorted: &[f64], p: f64, method: PercentileMethod) -> Option<f64> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let last = n - 1;
    let at = |i: f64| sorted[(i.max(0.0) as usize).min(last)];
    // numpy divides the percentile by 100 before anything else; keep that rounding.
    let q = p / 100.0;
    let nf = n as f64;
    let value = match method {
        PercentileMethod::NearestRank => {
            let k = (q * nf).ceil().max(1.0);
            at(k - 1.0)
        }
        PercentileMethod::Lower => at(((nf - 1.0) * q).floor()),
        PercentileMethod::Higher => at(((nf - 1.0) * q).ceil()),
        PercentileMethod::Midpoint => {
            let v = (nf - 1.0) * q;
            let (lo, hi) = (at(v.floor()), at(v.ceil()));
            lerp(lo, hi, 0.5)
        }
        PercentileMethod::Nearest => at(((nf - 1.0) * q).round_ties_even()),
        PercentileMethod::InvertedCdf => {
            let v = nf * q - 1.0;
            let prev = v.floor();
            at(if v - prev == 0.0 { prev } else { prev + 1.0 })
        }
        PercentileMethod::ClosestObservation => {
            let v = nf * q - 1.0 - 0.5;
            let prev = v.floor();
            // H&F choose the even order statistic at a tie; 1-based even is 0-based odd.
            let odd = prev.rem_euclid(2.0) == 1.0;
            at(if v - prev == 0.0 && odd {
                prev
            } else {
                prev + 1.0
            })
        }
        PercentileMethod::CdfSearch => {
            let pairs: Vec<(f64, f64)> = sorted.iter().map(|&v| (v, 1.0)).collect();
            return Weighted::new(pairs).and_then(|w| w.percentile(p));
        }
        PercentileMethod::AveragedInvertedCdf => {
            let v = nf * q - 1.0;
            let prev = v.floor();
            let gamma = if v - prev == 0.0 { 0.5 } else { 1.0 };
            interpolate(sorted, v, prev, gamma)
        }
        continuous => {
            let (alpha, beta) = match continuous {
                PercentileMethod::InterpolatedInvertedCdf => (0.0, 1.0),
                PercentileMethod::Hazen => (0.5, 0.5),
                PercentileMethod::Weibull => (0.0, 0.0),
                PercentileMethod::MedianUnbiased => (1.0 / 3.0, 1.0 / 3.0),
                PercentileMethod::NormalUnbiased => (3.0 / 8.0, 3.0 / 8.0),
                _ => (1.0, 1.0),
            };
            let v = if continuous == PercentileMethod::Linear {
                (nf - 1.0) * q
            } else {
                nf * q + (alpha + q * (1.0 - alpha - beta)) - 1.0
            };
            let prev = v.floor();
            interpolate(sorted, v, prev, v - prev)
        }
    };
    Some(value)
}

/// numpy's `_quantile` tail: clip the indexes, then `_lerp` between neighbours.
fn interpolate(sorted: &[f64], virtual_index: f64, prev: f64, gamma: f64) -> f64 {
    let last = (sorted.len() - 1) as f64;
    if virtual_index >= last {
        return sorted[sorted.len() - 1];
    }
    if virtual_index < 0.0 {
        return sorted[0];
    }
    let lo = sorted[prev as usize];
    let hi = sorted[((prev + 1.0).min(last)) as usize];
    lerp(lo, hi, gamma)
}

/// numpy's `_lerp`: the formula flips at t >= 0.5 so that t = 1 returns `b` exactly.
fn lerp(a: f64, b: f64, t: f64) -> f64 {
    let diff = b - a;
    if t >= 0.5 {
        b - diff * (1.0 - t)
    } else {
        a + diff * t
    }
}

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

    /// A uniform index below `n` (multiply-shift, no modulo bias worth the name).
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

/// A weighted distribution as GuideLLM's `DistributionSummary.from_values` builds it: sorted,
/// equal values merged, zero weights dropped.
#[derive(Debug, Clone, PartialEq)]
pub struct Weighted {
    values: Vec<f64>,
    probabilities: Vec<f64>,
    total_weight: f64,
}

impl Weighted {
    /// Builds the distribution from (value, weight) pairs; None when no weight is positive.
    pub fn new(mut pairs: Vec<(f64, f64)>) -> Option<Weighted> {
        pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut merged: Vec<(f64, f64)> = Vec::with_capacity(pairs.len());
        for (v, w) in pairs {
            match merged.last_mut() {
                Some((last, weight)) if *last == v => *weight += w,
                _ => merged.push((v, w)),
            }
        }
        merged.retain(|&(_, w)| w > 0.0);
        let total_weight: f64 = merged.iter().map(|&(_, w)| w).sum();
        if merged.is_empty() || total_weight <= 0.0 {
            return None;
        }
        Some(Weighted {
            values: merged.iter().map(|&(v, _)| v).collect(),
            probabilities: merged.iter().map(|&(_, w)| w / total_weight).collect(),
            total_weight,
        })
    }

    /// Σ v·p.
    pub fn mean(&self) -> f64 {
        self.values
            .iter()
            .zip(&self.probabilities)
            .map(|(v, p)| v * p)
            .sum()
    }

    /// sqrt(Σ (v - mean)²·p): the population standard deviation.
    pub fn std(&self) -> f64 {
        let mean = self.mean();
        let var: f64 = self
            .values
            .iter()
            .zip(&self.probabilities)
            .map(|(v, p)| (v - mean) * (v - mean) * p)
            .sum();
        var.sqrt()
    }

    /// round(Σ w).
    pub fn count(&self) -> f64 {
        self.total_weight.round()
    }

    /// Smallest value with positive weight.
    pub fn min(&self) -> f64 {
        self.values[0]
    }

    /// Largest value with positive weight.
    pub fn max(&self) -> f64 {
        self.values[self.values.len() - 1]
    }

    /// The first value whose cumulative probability reaches p/100 (numpy `searchsorted`
    /// side="left" on `cumsum`).
    pub fn percentile(&self, p: f64) -> Option<f64> {
        let q = p / 100.0;
        let mut cdf = 0.0;
        for (v, prob) in self.values.iter().zip(&self.probabilities) {
            cdf += prob;
            if cdf >= q {
                return Some(*v);
            }
        }
        self.values.last().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_matches_its_definition() {
        let v: Vec<f64> = (1..=16).map(f64::from).collect();
        // k = ceil(0.25 * 16) = 4; ceil(0.9 * 16) = 15; ceil(0.99 * 16) = 16.
        assert_eq!(
            percentile(&v, 25.0, PercentileMethod::NearestRank),
            Some(4.0)
        );
        assert_eq!(
            percentile(&v, 90.0, PercentileMethod::NearestRank),
            Some(15.0)
        );
        assert_eq!(
            percentile(&v, 99.0, PercentileMethod::NearestRank),
            Some(16.0)
        );
        assert_eq!(
            percentile(&v, 0.0, PercentileMethod::NearestRank),
            Some(1.0)
        );
    }

    /// Expected values printed by numpy 2.4:
    /// `np.percentile([((i*7919)%1000)/7.0 for i in range(37)], p, method=m)`.
    const NUMPY_37: &[(&str, [f64; 9])] = &[
        (
            "linear",
            [
                1.44,
                7.2,
                14.142857142857142,
                35.142857142857146,
                69.85714285714286,
                104.57142857142857,
                125.3142857142857,
                132.08571428571426,
                137.84571428571428,
            ],
        ),
        (
            "lower",
            [
                0.0,
                4.0,
                12.0,
                35.142857142857146,
                69.85714285714286,
                104.57142857142857,
                123.71428571428571,
                131.28571428571428,
                135.28571428571428,
            ],
        ),
        (
            "higher",
            [
                4.0,
                8.0,
                15.571428571428571,
                35.142857142857146,
                69.85714285714286,
                104.57142857142857,
                127.71428571428571,
                135.28571428571428,
                139.28571428571428,
            ],
        ),
        (
            "midpoint",
            [
                2.0,
                6.0,
                13.785714285714285,
                35.142857142857146,
                69.85714285714286,
                104.57142857142857,
                125.71428571428571,
                133.28571428571428,
                137.28571428571428,
            ],
        ),
        (
            "nearest",
            [
                0.0,
                8.0,
                15.571428571428571,
                35.142857142857146,
                69.85714285714286,
                104.57142857142857,
                123.71428571428571,
                131.28571428571428,
                139.28571428571428,
            ],
        ),
        (
            "inverted_cdf",
            [
                0.0,
                4.0,
                12.0,
                35.142857142857146,
                69.85714285714286,
                104.57142857142857,
                127.71428571428571,
                135.28571428571428,
                139.28571428571428,
            ],
        ),
        (
            "averaged_inverted_cdf",
            [
                0.0,
                4.0,
                12.0,
                35.142857142857146,
                69.85714285714286,
                104.57142857142857,
                127.71428571428571,
                135.28571428571428,
                139.28571428571428,
            ],
        ),
        (
            "closest_observation",
            [
                0.0,
                4.0,
                12.0,
                31.142857142857142,
                65.85714285714286,
                104.57142857142857,
                123.71428571428571,
                131.28571428571428,
                139.28571428571428,
            ],
        ),
        (
            "interpolated_inverted_cdf",
            [
                0.0,
                3.4000000000000004,
                10.8,
                32.142857142857146,
                67.85714285714286,
                103.57142857142857,
                124.91428571428573,
                131.88571428571427,
                137.8057142857143,
            ],
        ),
        (
            "hazen",
            [
                0.0,
                5.4,
                12.714285714285715,
                34.142857142857146,
                69.85714285714286,
                105.46428571428571,
                126.91428571428573,
                133.88571428571427,
                139.28571428571428,
            ],
        ),
        (
            "weibull",
            [
                0.0,
                3.6000000000000005,
                11.200000000000001,
                33.142857142857146,
                69.85714285714286,
                106.35714285714286,
                128.42857142857144,
                135.68571428571428,
                139.28571428571428,
            ],
        ),
        (
            "median_unbiased",
            [
                0.0,
                4.800000000000001,
                12.238095238095237,
                33.80952380952381,
                69.85714285714286,
                105.76190476190476,
                127.44761904761906,
                134.48571428571427,
                139.28571428571428,
            ],
        ),
        (
            "normal_unbiased",
            [
                0.0,
                4.950000000000001,
                12.35714285714286,
                33.892857142857146,
                69.85714285714286,
                105.6875,
                127.31428571428573,
                134.33571428571426,
                139.28571428571428,
            ],
        ),
    ];

    #[test]
    fn every_numpy_method_agrees_with_numpy_to_the_bit() {
        let mut v: Vec<f64> = (0..37).map(|i| ((i * 7919) % 1000) as f64 / 7.0).collect();
        sort(&mut v);
        let ps = [1.0, 5.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0];
        for (name, want) in NUMPY_37 {
            let m = PercentileMethod::from_name(name).unwrap();
            for (p, w) in ps.iter().zip(want) {
                assert_eq!(percentile(&v, *p, m), Some(*w), "{name} p{p}");
            }
        }
    }

    /// `np.sum`, `np.mean`, `np.std` and `np.std(ddof=1)` of `[i*0.1+(i%7)/3 for i in range(1000)]`.
    #[test]
    fn pairwise_moments_agree_with_numpy() {
        let v: Vec<f64> = (0..1000)
            .map(|i| i as f64 * 0.1 + (i % 7) as f64 / 3.0)
            .collect();
        assert_eq!(sum(&v, Summation::Pairwise), 50949.0);
        assert_eq!(mean(&v, Summation::Pairwise), Some(50.949));
        assert_eq!(
            std_dev(&v, StdKind::Population, Summation::Pairwise),
            Some(28.87807509551532)
        );
        assert_eq!(
            std_dev(&v, StdKind::Sample, Summation::Pairwise),
            Some(28.892524971373543)
        );
    }

    /// Python: `math.fsum([0.1]*10) == 1.0` while a running sum gives 0.9999999999999999.
    #[test]
    fn exact_sum_is_correctly_rounded() {
        assert_eq!(sum(&[0.1; 10], Summation::Exact), 1.0);
        assert_eq!(sum(&[0.1; 10], Summation::Naive), 0.9999999999999999);
        assert_eq!(sum(&[1e100, 1.0, -1e100], Summation::Exact), 1.0);
        assert_eq!(sum(&[], Summation::Exact), 0.0);
    }

    #[test]
    fn std_population_and_sample() {
        let v = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0];
        assert_eq!(
            std_dev(&v, StdKind::Population, Summation::Naive),
            Some(2.0)
        );
        let s = std_dev(&v, StdKind::Sample, Summation::Naive).unwrap();
        assert!((s - 2.138089935299395).abs() < 1e-15);
        assert_eq!(std_dev(&[1.0], StdKind::Sample, Summation::Naive), None);
    }

    #[test]
    fn weighted_distribution_follows_guidellm() {
        // Values 10 (weight 1), 20 (weight 3): mean 17.5, population std sqrt(18.75).
        let w = Weighted::new(vec![(20.0, 1.0), (10.0, 1.0), (20.0, 2.0), (99.0, 0.0)]).unwrap();
        assert_eq!(w.mean(), 17.5);
        assert_eq!(w.std(), 18.75f64.sqrt());
        assert_eq!((w.min(), w.max(), w.count()), (10.0, 20.0, 4.0));
        assert_eq!(w.percentile(25.0), Some(10.0));
        assert_eq!(w.percentile(25.1), Some(20.0));
        // Unit weights: the first value whose share reaches q.
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 50.0, PercentileMethod::CdfSearch), Some(2.0));
        assert_eq!(percentile(&v, 50.1, PercentileMethod::CdfSearch), Some(3.0));
    }

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
    }

    #[test]
    fn names_round_trip() {
        for m in PercentileMethod::ALL {
            assert_eq!(PercentileMethod::from_name(m.name()), Some(m));
        }
    }
}
