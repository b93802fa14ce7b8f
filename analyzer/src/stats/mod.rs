//! Summary statistics with the exact arithmetic of the tools whose numbers we reproduce.
//!
//! Percentiles come in every method numpy offers plus nearest rank and GuideLLM's weighted
//! inverse CDF; sums come naive (a running sum), exact (Python's `math.fsum`) or pairwise
//! (numpy's `add.reduce`), because a mean printed to the last bit depends on the order of
//! additions.

mod resample;
mod weighted;

pub use resample::{bootstrap_ci, thin, SplitMix64};
pub use weighted::Weighted;

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
        PercentileMethod::AveragedInvertedCdf => {
            let v = nf * q - 1.0;
            let prev = v.floor();
            let gamma = if v - prev == 0.0 { 0.5 } else { 1.0 };
            interpolate(sorted, v, prev, gamma)
        }
        PercentileMethod::CdfSearch => {
            let pairs: Vec<(f64, f64)> = sorted.iter().map(|&v| (v, 1.0)).collect();
            return Weighted::new(pairs).and_then(|w| w.percentile(p));
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

#[cfg(test)]
mod tests;
