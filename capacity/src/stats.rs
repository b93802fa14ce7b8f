//! The statistics AIPerf reports: numpy's default ("linear") percentile and the mean.
//!
//! Computed the way numpy computes them, operation for operation, so a value matches AIPerf's
//! to the last bit: virtual index `(n - 1) * (p / 100)`, then numpy's `_lerp`, which
//! interpolates from the upper neighbour when the fraction is at least one half.

/// numpy `percentile(values, p)` with the default linear method; None when `values` is empty.
pub fn percentile_linear(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    Some(percentile_of_sorted(&sorted, p))
}

/// As [`percentile_linear`] on values already sorted ascending (not empty).
pub fn percentile_of_sorted(sorted: &[f64], p: f64) -> f64 {
    let n = sorted.len();
    let quantile = p / 100.0;
    let virtual_index = (n as f64 - 1.0) * quantile;
    let below = virtual_index.floor();
    let gamma = virtual_index - below;
    let lower = (below.max(0.0) as usize).min(n - 1);
    let upper = (lower + 1).min(n - 1);
    lerp(sorted[lower], sorted[upper], gamma)
}

/// numpy's `_lerp`: `a + (b - a) * t`, or `b - (b - a) * (1 - t)` when `t >= 0.5`.
fn lerp(a: f64, b: f64, t: f64) -> f64 {
    let diff = b - a;
    if t >= 0.5 {
        b - diff * (1.0 - t)
    } else {
        a + diff * t
    }
}

/// Arithmetic mean as AIPerf takes it: a running sum in record order divided by the count;
/// None when empty.
pub fn mean(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    Some(values.iter().sum::<f64>() / values.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_numpy_on_small_sets() {
        // numpy.percentile([1, 2, 3, 4], [0, 25, 50, 95, 100]) = [1, 1.75, 2.5, 3.85, 4]
        let v = [4.0, 1.0, 3.0, 2.0];
        assert_eq!(percentile_linear(&v, 0.0), Some(1.0));
        assert_eq!(percentile_linear(&v, 25.0), Some(1.75));
        assert_eq!(percentile_linear(&v, 50.0), Some(2.5));
        assert_eq!(percentile_linear(&v, 100.0), Some(4.0));
        let p95 = percentile_linear(&v, 95.0).unwrap();
        assert!((p95 - 3.85).abs() < 1e-12);
        assert_eq!(percentile_linear(&[7.0], 95.0), Some(7.0));
        assert_eq!(percentile_linear(&[], 95.0), None);
        assert_eq!(mean(&[1.0, 2.0, 6.0]), Some(3.0));
        assert_eq!(mean(&[]), None);
    }

    #[test]
    fn reproduces_aiperf_ttft_percentiles_of_the_fixture_run() {
        // time_to_first_token of the 20 requests in fixtures/aiperf-0.13-chat (ms), and AIPerf's
        // own p50/p95/p99 from profile_export_aiperf.json.
        let ttft = fixture_ttfts();
        assert_eq!(percentile_linear(&ttft, 50.0), Some(51.1238695));
        assert_eq!(percentile_linear(&ttft, 95.0), Some(59.3827385));
        assert_eq!(percentile_linear(&ttft, 99.0), Some(63.714350899999985));
    }

    fn fixture_ttfts() -> Vec<f64> {
        let path = crate::fixture_path("aiperf-0.13-chat/profile_export.jsonl");
        let text = std::fs::read_to_string(path).unwrap();
        text.lines()
            .map(|line| {
                let record: serde_json::Value = serde_json::from_str(line).unwrap();
                record["metrics"]["time_to_first_token"]["value"]
                    .as_f64()
                    .unwrap()
            })
            .collect()
    }
}
