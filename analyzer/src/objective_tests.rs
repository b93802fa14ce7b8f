use super::*;
use crate::protocol::builtin;

fn parse(text: &str) -> Slo {
    Slo::parse(text).unwrap()
}

fn resolved(protocol: &str, text: &str) -> Result<Slo, SloError> {
    parse(text).resolve(&builtin::find(protocol).unwrap())
}

#[test]
fn parses_units_and_operators() {
    let s = parse("ttft:p95<500ms");
    assert_eq!(
        (s.metric.as_str(), s.stat, s.threshold, s.comparison),
        ("ttft", Stat::Percentile(95.0), 500.0, Comparison::Less)
    );
    assert_eq!(parse("e2e:max<=2s").threshold, 2000.0);
    assert_eq!(parse("e2e:max<=2s").comparison, Comparison::LessOrEqual);
    assert_eq!(parse("itl:p99<250us").threshold, 0.25);
    assert_eq!(parse("itl:p99<250µs").threshold, 0.25);
    assert!(Slo::parse("ttft<5ms").is_err());
    assert!(Slo::parse("ttft:p101<5ms").is_err());
    assert!(Slo::parse("ttft:p50<fastms").is_err());
}

#[test]
fn every_spelling_the_capacity_grammar_took_with_a_unit_still_parses() {
    let s = parse(" request_latency : p99 <= 30s ");
    assert_eq!(
        (s.metric.as_str(), s.threshold),
        ("request_latency", 30000.0)
    );
    assert_eq!(s.comparison, Comparison::LessOrEqual);
    let s = parse("itl:avg<50000us");
    assert_eq!((s.stat, s.threshold), (Stat::Mean, 50.0));
    let s = parse("per_user_tps:p50>=20tok/s");
    assert_eq!(
        (s.comparison, s.threshold),
        (Comparison::GreaterOrEqual, 20.0)
    );
    assert_eq!(parse("per_user_tps:avg>12tps").unit, Unit::TokensPerSecond);
    assert_eq!(parse("TTFT:P95<10000MS").threshold, 10000.0);
    assert_eq!(parse("ttft:mean<1ms").stat, Stat::Mean);
}

#[test]
fn a_bare_number_is_refused_with_the_accepted_form() {
    let e = Slo::parse("ttft:p95<200").unwrap_err();
    assert!(e.reason.contains("needs a unit"), "{e}");
    assert!(e.to_string().contains("`ttft:p95<200ms`"), "{e}");
    let e = Slo::parse("per_user_tps:p50>=20").unwrap_err();
    assert!(
        e.to_string().contains("e.g. `per_user_tps:p50>=20tok/s`"),
        "{e}"
    );
    for bad in ["ttft:p95<10mss", "ttft:p95<-5ms", "ttft:p95<ms", "ttft:p95"] {
        assert!(Slo::parse(bad).is_err(), "{bad} should be refused");
    }
}

#[test]
fn the_canonical_form_parses_back_to_the_same_objective() {
    for text in [
        "ttft:p95<10000ms",
        "itl:p99.9<=45.5ms",
        "per_user_tps:mean>12tok/s",
        "e2e:max<=2.5s",
        "itl:p50<250us",
        "prefix_cache_hit:mean>=50%",
        "output_tokens:min>=100tokens",
    ] {
        let slo = parse(text);
        assert_eq!(slo.to_string(), text);
        let again = parse(&slo.to_string());
        assert_eq!((again.threshold, again.unit), (slo.threshold, slo.unit));
    }
    assert_eq!(parse("ttft : avg < 2 s").to_string(), "ttft:mean<2s");
}

#[test]
fn short_names_resolve_under_every_protocol_that_has_the_metric() {
    let cases = [
        ("aiperf", "ttft", "time_to_first_token"),
        ("capacity-v3", "ttft", "ttft_ms"),
        ("capacity-v3", "time_to_first_token", "ttft_ms"),
        ("capacity-v3", "request_latency", "e2e_ms"),
        ("vllm", "latency", "e2el_ms"),
        ("vllm", "e2e", "e2el_ms"),
        ("sglang", "e2e", "e2e_latency_ms"),
        ("aiperf", "per_user_tps", "output_token_throughput_per_user"),
        ("tokentrace-v1", "itl", "itl_ms"),
        ("tokentrace-v1", "ttft_content", "ttft_content_ms"),
        ("guidellm", "tpot", "time_per_output_token_ms"),
    ];
    for (protocol, metric, want) in cases {
        let slo = resolved(protocol, &format!("{metric}:p95<1ms"))
            .or_else(|_| resolved(protocol, &format!("{metric}:p95>1tok/s")));
        assert_eq!(slo.unwrap().metric, want, "{protocol} {metric}");
    }
    let e = resolved("capacity-v3", "per_user_tps:p50>20tok/s").unwrap_err();
    assert!(e.reason.contains("has no metric `per_user_tps`"), "{e}");
}

#[test]
fn the_unit_must_fit_the_metric_and_becomes_the_metrics_own() {
    let e = resolved("aiperf", "per_user_tps:p50>20ms").unwrap_err();
    assert!(e.reason.contains("write its threshold in tok/s"), "{e}");
    assert!(resolved("aiperf", "ttft:p95<20tok/s").is_err());
    // GuideLLM keeps request latency in seconds: 2 s is 2 there, not 2000.
    let slo = resolved("guidellm", "e2e:p95<2s").unwrap();
    assert_eq!(
        (slo.metric.as_str(), slo.threshold),
        ("request_latency", 2.0)
    );
    let slo = resolved("tokentrace-v1", "prefix_cache_hit:mean>=50%").unwrap();
    assert_eq!(slo.threshold, 0.5);
    assert!(resolved("tokentrace-v1", "content_chunks:p50>=10chunks").is_ok());
    assert!(resolved("tokentrace-v1", "content_chunks:p50>=10tokens").is_err());
    // Resolving twice changes nothing.
    let p = builtin::find("guidellm").unwrap();
    let once = parse("e2e:p95<2s").resolve(&p).unwrap();
    assert_eq!(once.clone().resolve(&p).unwrap(), once);
}

#[test]
fn comparisons_differ_at_the_threshold() {
    assert!(!Comparison::Less.holds(10.0, 10.0));
    assert!(Comparison::LessOrEqual.holds(10.0, 10.0));
    assert!(!Comparison::Greater.holds(10.0, 10.0));
    assert!(Comparison::GreaterOrEqual.holds(10.0, 10.0));
}
