//! Compares two analyses under one protocol: per metric the change of the median and mean,
//! a bootstrap confidence interval of the difference of medians, and a Mann-Whitney U test, so
//! a real regression can be told from noise.

use crate::analysis::Analysis;
use crate::protocol::Quantity;
use crate::stats::{self, PercentileMethod, Summation};
use crate::summary::{self, number};
use serde_json::{json, Value};

/// Settings of a comparison.
#[derive(Debug, Clone, Copy)]
pub struct CompareOptions {
    /// Bootstrap resamples.
    pub resamples: usize,
    /// Confidence level of the interval and 1 - significance of the test (e.g. 0.95).
    pub confidence: f64,
    /// Seed of the resampling (results are reproducible).
    pub seed: u64,
    /// Largest sample the bootstrap resamples; larger samples are thinned evenly first
    /// (pooled gaps can number in the hundreds of millions).
    pub max_bootstrap_sample: usize,
}

impl Default for CompareOptions {
    fn default() -> Self {
        CompareOptions {
            resamples: 1000,
            confidence: 0.95,
            seed: 0x5eed,
            max_bootstrap_sample: 20_000,
        }
    }
}

/// One metric's comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricChange {
    /// Metric name.
    pub metric: String,
    /// Unit.
    pub unit: String,
    /// Sample sizes (A, B).
    pub samples: (usize, usize),
    /// Medians (A, B).
    pub median: (Option<f64>, Option<f64>),
    /// Means (A, B).
    pub mean: (Option<f64>, Option<f64>),
    /// Bootstrap interval of median(B) - median(A).
    pub median_diff_ci: Option<(f64, f64)>,
    /// Two-sided Mann-Whitney U p-value.
    pub p_value: Option<f64>,
    /// Both the interval excludes 0 and p < 1 - confidence.
    pub beyond_noise: bool,
    /// `higher`/`lower` when beyond noise, else `same`.
    pub direction: &'static str,
}

impl MetricChange {
    /// Relative change of the median, B over A, in percent.
    pub fn median_change_pct(&self) -> Option<f64> {
        match self.median {
            (Some(a), Some(b)) if a != 0.0 => Some((b - a) / a.abs() * 100.0),
            _ => None,
        }
    }

    /// As JSON.
    pub fn to_json(&self) -> Value {
        json!({
            "metric": self.metric,
            "unit": self.unit,
            "samples": [self.samples.0, self.samples.1],
            "median": [number(self.median.0), number(self.median.1)],
            "median_change_pct": number(self.median_change_pct()),
            "mean": [number(self.mean.0), number(self.mean.1)],
            "median_diff_ci": self.median_diff_ci.map(|(lo, hi)| json!([lo, hi])),
            "mann_whitney_p": number(self.p_value),
            "beyond_noise": self.beyond_noise,
            "direction": self.direction,
        })
    }
}

/// Compares every summarized, non-count metric of the protocol.
pub fn compare(a: &Analysis<'_>, b: &Analysis<'_>, options: &CompareOptions) -> Vec<MetricChange> {
    let protocol = a.protocol;
    protocol
        .metrics
        .iter()
        .enumerate()
        .filter(|(_, def)| def.summary && !matches!(def.quantity, Quantity::Count { .. }))
        .map(|(m, def)| {
            let xs = summary::column(a, m);
            let ys = summary::column(b, m);
            metric_change(&def.name, &def.unit, xs, ys, options)
        })
        .collect()
}

fn metric_change(
    name: &str,
    unit: &str,
    mut xs: Vec<f64>,
    mut ys: Vec<f64>,
    o: &CompareOptions,
) -> MetricChange {
    let mean = (
        stats::mean(&xs, Summation::Exact),
        stats::mean(&ys, Summation::Exact),
    );
    stats::sort(&mut xs);
    stats::sort(&mut ys);
    let median = (median_of(&xs), median_of(&ys));
    let ci = bootstrap_median_diff(
        &stats::thin(&xs, o.max_bootstrap_sample),
        &stats::thin(&ys, o.max_bootstrap_sample),
        o,
    );
    let p_value = mann_whitney_p(&xs, &ys);
    let alpha = 1.0 - o.confidence;
    let beyond_noise =
        ci.is_some_and(|(lo, hi)| lo > 0.0 || hi < 0.0) && p_value.is_some_and(|p| p < alpha);
    let direction = match (beyond_noise, median) {
        (true, (Some(a), Some(b))) if b > a => "higher",
        (true, (Some(a), Some(b))) if b < a => "lower",
        _ => "same",
    };
    MetricChange {
        metric: name.to_string(),
        unit: unit.to_string(),
        samples: (xs.len(), ys.len()),
        median,
        mean,
        median_diff_ci: ci,
        p_value,
        beyond_noise,
        direction,
    }
}

fn median_of(sorted: &[f64]) -> Option<f64> {
    stats::percentile(sorted, 50.0, PercentileMethod::Linear)
}

/// Percentile bootstrap interval of median(B) - median(A).
pub fn bootstrap_median_diff(xs: &[f64], ys: &[f64], o: &CompareOptions) -> Option<(f64, f64)> {
    if xs.is_empty() || ys.is_empty() || o.resamples == 0 {
        return None;
    }
    let mut rng = stats::SplitMix64(o.seed);
    let mut diffs = Vec::with_capacity(o.resamples);
    let (mut ra, mut rb) = (vec![0.0; xs.len()], vec![0.0; ys.len()]);
    for _ in 0..o.resamples {
        for v in ra.iter_mut() {
            *v = xs[rng.below(xs.len())];
        }
        for v in rb.iter_mut() {
            *v = ys[rng.below(ys.len())];
        }
        stats::sort(&mut ra);
        stats::sort(&mut rb);
        diffs.push(median_of(&rb)? - median_of(&ra)?);
    }
    stats::sort(&mut diffs);
    let tail = (1.0 - o.confidence) / 2.0 * 100.0;
    Some((
        stats::percentile(&diffs, tail, PercentileMethod::Linear)?,
        stats::percentile(&diffs, 100.0 - tail, PercentileMethod::Linear)?,
    ))
}

/// The failure rates of two runs: requests of the counted phases whose outcome the protocol
/// does not count as a success, and whether the rates differ beyond noise.
#[derive(Debug, Clone, PartialEq)]
pub struct FailureChange {
    /// Failed requests (A, B).
    pub failed: (u64, u64),
    /// Requests of the counted phases (A, B).
    pub total: (u64, u64),
    /// Two-sided p-value of the two-proportion z-test (None when a side has no request).
    pub p_value: Option<f64>,
    /// p < 1 - confidence.
    pub beyond_noise: bool,
    /// `higher`/`lower` when beyond noise, else `same`.
    pub direction: &'static str,
}

impl FailureChange {
    /// Failure rate of A and of B (None for a side without requests).
    pub fn rates(&self) -> (Option<f64>, Option<f64>) {
        let rate = |f: u64, n: u64| (n > 0).then(|| f as f64 / n as f64);
        (
            rate(self.failed.0, self.total.0),
            rate(self.failed.1, self.total.1),
        )
    }

    /// As JSON.
    pub fn to_json(&self) -> Value {
        let (ra, rb) = self.rates();
        json!({
            "failed": [self.failed.0, self.failed.1],
            "requests": [self.total.0, self.total.1],
            "rate": [number(ra), number(rb)],
            "p_value": number(self.p_value),
            "beyond_noise": self.beyond_noise,
            "direction": self.direction,
        })
    }
}

/// Compares the failure rates of `a` and `b` with a two-proportion z-test.
pub fn compare_failures(
    a: &Analysis<'_>,
    b: &Analysis<'_>,
    options: &CompareOptions,
) -> FailureChange {
    let count = |x: &Analysis<'_>| {
        let failed = x.failed.len() as u64;
        (failed, failed + x.counted.len() as u64)
    };
    let ((fa, na), (fb, nb)) = (count(a), count(b));
    let p_value = two_proportion_p(fa, na, fb, nb);
    let beyond_noise = p_value.is_some_and(|p| p < 1.0 - options.confidence);
    let direction = match (beyond_noise, fb as f64 * na as f64 > fa as f64 * nb as f64) {
        (false, _) => "same",
        (true, true) => "higher",
        (true, false) => "lower",
    };
    FailureChange {
        failed: (fa, fb),
        total: (na, nb),
        p_value,
        beyond_noise,
        direction,
    }
}

/// Two-sided p-value that `fa` of `na` and `fb` of `nb` come from one rate (pooled
/// two-proportion z-test); 1 when both rates are 0 or both 1.
pub fn two_proportion_p(fa: u64, na: u64, fb: u64, nb: u64) -> Option<f64> {
    if na == 0 || nb == 0 {
        return None;
    }
    let (na_f, nb_f) = (na as f64, nb as f64);
    let pooled = (fa + fb) as f64 / (na_f + nb_f);
    let se = (pooled * (1.0 - pooled) * (1.0 / na_f + 1.0 / nb_f)).sqrt();
    if se <= 0.0 || se.is_nan() {
        return Some(1.0);
    }
    let z = (fb as f64 / nb_f - fa as f64 / na_f).abs() / se;
    Some(erfc(z / std::f64::consts::SQRT_2).min(1.0))
}

/// Two-sided Mann-Whitney U p-value (normal approximation with tie and continuity
/// corrections) of two ascending samples.
pub fn mann_whitney_p(xs: &[f64], ys: &[f64]) -> Option<f64> {
    let (n1, n2) = (xs.len() as f64, ys.len() as f64);
    if xs.is_empty() || ys.is_empty() {
        return None;
    }
    // Merge the two sorted samples, giving tied values their average rank.
    let (mut i, mut j, mut rank) = (0, 0, 1.0f64);
    let (mut rank_sum_x, mut tie_term) = (0.0, 0.0);
    while i < xs.len() || j < ys.len() {
        let v = match (xs.get(i), ys.get(j)) {
            (Some(&x), Some(&y)) => x.min(y),
            (Some(&x), None) => x,
            (None, Some(&y)) => y,
            (None, None) => break,
        };
        let (mut cx, mut cy) = (0.0, 0.0);
        while xs.get(i) == Some(&v) {
            cx += 1.0;
            i += 1;
        }
        while ys.get(j) == Some(&v) {
            cy += 1.0;
            j += 1;
        }
        let t = cx + cy;
        let average = rank + (t - 1.0) / 2.0;
        rank_sum_x += cx * average;
        tie_term += t * t * t - t;
        rank += t;
    }
    let n = n1 + n2;
    let u = rank_sum_x - n1 * (n1 + 1.0) / 2.0;
    let mu = n1 * n2 / 2.0;
    let sigma = (n1 * n2 / 12.0 * ((n + 1.0) - tie_term / (n * (n - 1.0)))).sqrt();
    // All values tied (or NaN): no evidence of a difference.
    if sigma.is_nan() || sigma <= 0.0 {
        return Some(1.0);
    }
    let z = ((u - mu).abs() - 0.5).max(0.0) / sigma;
    Some(erfc(z / std::f64::consts::SQRT_2).min(1.0))
}

/// Complementary error function (W. J. Cody's rational Chebyshev form as in Numerical
/// Recipes' erfcc; relative error below 1.2e-7, ample for a p-value).
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87
                                        + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same test as scipy.stats.mannwhitneyu(method="asymptotic", use_continuity=True),
    /// evaluated in Python with math.erfc: 0.012185780355344818 and, with ties,
    /// 0.13665824773814753.
    #[test]
    fn two_proportions_like_statsmodels() {
        // statsmodels.stats.proportion.proportions_ztest([2, 18], [20, 20]):
        // z = -5.0596, p = 4.2e-07.
        let p = two_proportion_p(2, 20, 18, 20).unwrap();
        assert!((p - 4.2e-7).abs() < 1e-7, "{p}");
        assert_eq!(two_proportion_p(0, 20, 0, 20), Some(1.0));
        assert_eq!(two_proportion_p(20, 20, 20, 20), Some(1.0));
        assert_eq!(two_proportion_p(0, 0, 3, 20), None);
        // One failure in 20 against none: within noise at 95 %.
        assert!(two_proportion_p(0, 20, 1, 20).unwrap() > 0.05);
    }

    #[test]
    fn mann_whitney_matches_scipy_asymptotic() {
        let p = mann_whitney_p(&[1.0, 2.0, 3.0, 4.0, 5.0], &[6.0, 7.0, 8.0, 9.0, 10.0]).unwrap();
        assert!((p - 0.012_185_780_355).abs() < 1e-6, "{p}");
        let p = mann_whitney_p(&[1.0, 2.0, 2.0, 3.0], &[2.0, 3.0, 4.0, 5.0]).unwrap();
        assert!((p - 0.136_658_247_738).abs() < 1e-6, "{p}");
        assert_eq!(mann_whitney_p(&[1.0, 1.0], &[1.0, 1.0]), Some(1.0));
    }

    #[test]
    fn bootstrap_sees_a_shift_and_not_noise() {
        let xs: Vec<f64> = (0..200).map(|i| 100.0 + (i % 17) as f64).collect();
        let ys: Vec<f64> = xs.iter().map(|v| v + 10.0).collect();
        let shifted = metric_change("ttft_ms", "ms", xs.clone(), ys, &CompareOptions::default());
        assert!(shifted.beyond_noise);
        assert_eq!(shifted.direction, "higher");
        let (lo, hi) = shifted.median_diff_ci.unwrap();
        assert!(lo <= 10.0 && 10.0 <= hi, "{lo} {hi}");
        let mut same = xs.clone();
        same.reverse();
        let noise = metric_change("ttft_ms", "ms", xs, same, &CompareOptions::default());
        assert!(!noise.beyond_noise);
        assert_eq!(noise.direction, "same");
    }
}
