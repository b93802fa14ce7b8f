//! Unit tests of the statistics, against values printed by numpy 2.4 and CPython.

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
    assert_eq!(percentile(&[], 50.0, PercentileMethod::NearestRank), None);
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
fn names_round_trip() {
    for m in PercentileMethod::ALL {
        assert_eq!(PercentileMethod::from_name(m.name()), Some(m));
    }
}

/// numpy-linear percentiles (`_lerp` from the upper neighbour at t >= 0.5) and the running-sum
/// mean, the statistics AIPerf and the capacity report take.
#[test]
fn linear_and_naive_mean_match_numpy_on_small_sets() {
    // numpy.percentile([1, 2, 3, 4], [0, 25, 50, 95, 100]) = [1, 1.75, 2.5, 3.85, 4]
    let mut v = vec![4.0, 1.0, 3.0, 2.0];
    sort(&mut v);
    let linear = |v: &[f64], p: f64| percentile(v, p, PercentileMethod::Linear);
    assert_eq!(linear(&v, 0.0), Some(1.0));
    assert_eq!(linear(&v, 25.0), Some(1.75));
    assert_eq!(linear(&v, 50.0), Some(2.5));
    assert_eq!(linear(&v, 100.0), Some(4.0));
    let p95 = linear(&v, 95.0).unwrap();
    assert!((p95 - 3.85).abs() < 1e-12);
    assert_eq!(linear(&[7.0], 95.0), Some(7.0));
    assert_eq!(linear(&[], 95.0), None);
    assert_eq!(mean(&[1.0, 2.0, 6.0], Summation::Naive), Some(3.0));
    assert_eq!(mean(&[], Summation::Naive), None);
}

#[test]
fn linear_reproduces_aiperf_ttft_percentiles_of_the_fixture_run() {
    // time_to_first_token of the 20 requests in fixtures/aiperf-0.13-chat (ms), and AIPerf's
    // own p50/p95/p99 from profile_export_aiperf.json.
    let mut ttft = aiperf_fixture_ttfts();
    sort(&mut ttft);
    let linear = |p: f64| percentile(&ttft, p, PercentileMethod::Linear);
    assert_eq!(linear(50.0), Some(51.1238695));
    assert_eq!(linear(95.0), Some(59.3827385));
    assert_eq!(linear(99.0), Some(63.714350899999985));
}

fn aiperf_fixture_ttfts() -> Vec<f64> {
    let crate_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let name = "aiperf-0.13-chat/profile_export.jsonl";
    let path = crate_dir.join("../tests/fixtures").join(name);
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
