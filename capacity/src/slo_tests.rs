use super::*;
use crate::metrics::tests::record;
use tokentrace_format::Phase;

fn trial(spec: &str) -> TrialSlo {
    spec.parse().unwrap()
}

#[test]
fn parses_the_fixture_objective() {
    let slo = trial("ttft:p95<10000ms");
    assert_eq!(slo.slo().metric, "time_to_first_token");
    assert_eq!(slo.slo().stat, Stat::Percentile(95.0));
    assert_eq!(slo.slo().comparison, Comparison::Less);
    assert_eq!(slo.slo().threshold, 10000.0);
    assert_eq!(
        slo.report_block().to_string(),
        r#"{"metric":"time_to_first_token","percentile":95,"threshold_ms":10000,"comparison":"strictly_less_than","all_confirmation_trials_must_pass":true}"#
    );
}

#[test]
fn units_aliases_and_inclusive_comparisons() {
    let slo = trial(" request_latency : p99 <= 30s ");
    assert_eq!(slo.slo().metric, "request_latency");
    assert_eq!(slo.slo().comparison, Comparison::LessOrEqual);
    assert_eq!(slo.slo().threshold, 30000.0);
    for alias in ["latency", "e2e", "e2e_latency"] {
        assert_eq!(
            trial(&format!("{alias}:p50<1s")).slo().metric,
            "request_latency"
        );
    }
    let slo = trial("itl:avg<50000us");
    assert_eq!(slo.slo().stat, Stat::Mean);
    assert_eq!(slo.slo().threshold, 50.0);
    assert!(slo
        .report_block()
        .to_string()
        .contains(r#""statistic":"avg""#));
    let slo = trial("per_user_tps:p50>=20tok/s");
    assert_eq!(slo.slo().metric, "output_token_throughput_per_user");
    assert_eq!(slo.slo().comparison, Comparison::GreaterOrEqual);
    assert_eq!(slo.report_block()["threshold_tps"], json!(20));
}

#[test]
fn capacity_and_analyze_accept_the_same_strings() {
    // Spellings only one of the two grammars took before: `analyze`'s p0 and `mean`, the
    // capacity grammar's `avg`, `>=`, aliases and whitespace; all parse the same for both.
    for spec in [
        "ttft:p0<1ms",
        "ttft:mean<1ms",
        "ttft:avg<1ms",
        "time_to_first_token:p99.9<=2s",
        "itl : p50 < 250us",
        "per_user_tps:p50>=20tps",
    ] {
        let analyzer = Slo::parse(spec).unwrap();
        assert_eq!(parse_all(&[spec.to_string()]).unwrap(), [analyzer]);
        assert!(spec.parse::<TrialSlo>().is_ok(), "{spec}");
    }
}

#[test]
fn rejects_malformed_specs() {
    for spec in [
        "ttft",
        "ttft:p95",
        "bogus:p95<1ms",
        "ttft:p101<1ms",
        "ttft:q95<1ms",
        "ttft:p95<10000",
        "ttft:p95<abcms",
        "per_user_tps:p50>20ms",
        "per_user_tps:p50>=20",
        "tpot:p95<5ms",
    ] {
        assert!(
            spec.parse::<TrialSlo>().is_err(),
            "{spec} should be rejected"
        );
    }
    let bare = parse_all(&["ttft:p95<10000".into()])
        .unwrap_err()
        .to_string();
    assert!(
        bare.contains("needs a unit, e.g. `ttft:p95<10000ms`"),
        "{bare}"
    );
    assert!(parse_all(&[]).is_err());
}

#[test]
fn a_stored_rate_without_a_unit_from_an_older_search_still_reads() {
    let stored = vec!["ttft:p95<10000ms".to_string(), "per_user_tps:avg>12".into()];
    let slos = parse_stored(&stored).unwrap();
    assert_eq!(
        (slos[1].threshold, slos[1].to_string()),
        (12.0, "per_user_tps:mean>12tok/s".into())
    );
    assert!(parse_all(&stored).is_err());
    assert!(parse_stored(&["ttft:p95<10000".into()]).is_err());
}

#[test]
fn judged_on_the_trials_own_values() {
    // TTFT 100 and 300 ms; ITL 100 and 50 ms, so 10 and 20 tok/s per user.
    let records = vec![
        record(1, Phase::Measured, 1000, &[100, 200, 300, 400], 4),
        record(2, Phase::Measured, 1500, &[300, 500], 5),
    ];
    let metrics = TrialMetrics::from_records(&records).unwrap();
    assert_eq!(trial("ttft:p50<=200ms").observe(&metrics), Some(200.0));
    assert!(trial("ttft:p50<=200ms").holds(&metrics));
    assert!(!trial("ttft:p50<200ms").holds(&metrics));
    assert!(trial("per_user_tps:mean>=15tok/s").holds(&metrics));
    assert!(!trial("per_user_tps:min>10tok/s").holds(&metrics));
    let empty = TrialMetrics::from_records(&[]).unwrap();
    assert!(!trial("ttft:p50<1s").holds(&empty));
}
