//! tokentrace's own report layout: `metrics.NAME.STAT` in protocol order.

use crate::analysis::{Analysis, Bootstrap};
use crate::methodology;
use crate::protocol::Stat;
use crate::summary::{self, number};
use crate::{quantity, stats};
use serde_json::{json, Map, Value};

/// The whole report of one analysis.
pub fn report(analysis: &Analysis<'_>) -> Value {
    let protocol = analysis.protocol;
    let dataset = analysis.dataset;
    let traces: Vec<Value> = analysis
        .traces
        .iter()
        .map(|&t| {
            let info = &dataset.traces[t as usize];
            json!({
                "trace": info.label,
                "model": info.manifest.model,
                "labels": info.manifest.labels,
                "integrity": info.integrity,
                "warnings": info.warnings,
                "finished": info.run_end.is_some(),
            })
        })
        .collect();
    let mut metrics = Map::new();
    for m in summary::metrics(protocol, analysis) {
        let def = &protocol.metrics[m.metric];
        let mut stats = Map::new();
        stats.insert("unit".into(), json!(def.unit));
        for (stat, value) in m.stats {
            let v = match stat {
                Stat::Samples => json!(value.unwrap_or(0.0) as u64),
                _ => number(value),
            };
            stats.insert(protocol.stat_key(stat), v);
        }
        if let Some(b) = analysis.bootstrap {
            let wanted: Vec<Stat> = protocol.stats_of(def).to_vec();
            stats.insert(
                "ci".into(),
                confidence_intervals(analysis, m.metric, &wanted, b),
            );
        }
        metrics.insert(def.name.clone(), Value::Object(stats));
    }
    let aggregates: Map<String, Value> = summary::aggregates(protocol, analysis, &analysis.run)
        .into_iter()
        .collect();
    let slos: Vec<Value> = analysis
        .slos
        .iter()
        .map(|slo| {
            let (value, met) = slo.evaluate(analysis);
            json!({"slo": slo.text, "metric": slo.metric, "stat": slo.stat.key(),
                   "threshold": slo.threshold, "value": number(value), "met": met})
        })
        .collect();
    let methodology: Map<String, Value> = methodology::timing_methodology(protocol)
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    json!({
        "protocol": protocol.name,
        "protocol_version": protocol.version,
        "traces": traces,
        "requests": {
            "counted": analysis.run.completed,
            "failed": analysis.run.failed,
            "excluded_by_phase": analysis.excluded_phase,
            "missing_done": analysis.run.missing_done,
        },
        "notes": summary::notes_json(&analysis.run.notes),
        "metrics": metrics,
        "aggregates": aggregates,
        "slo": slos,
        "timing_methodology": methodology,
    })
}

/// `{"confidence": c, STAT: [low, high], …}` for the mean, median and percentiles of a metric.
/// Samples above 20 000 values are thinned evenly first.
fn confidence_intervals(analysis: &Analysis<'_>, m: usize, wanted: &[Stat], b: Bootstrap) -> Value {
    let protocol = analysis.protocol;
    let (mut values, scale) = summary::statistic_column(protocol, analysis, m);
    stats::sort(&mut values);
    let values = stats::thin(&values, 20_000);
    let mut out = Map::new();
    out.insert("confidence".into(), json!(b.confidence));
    for &stat in wanted {
        if !matches!(stat, Stat::Mean | Stat::Median | Stat::Percentile(_)) {
            continue;
        }
        let statistic = |sample: &mut [f64]| {
            quantity::summarize(
                sample.to_vec(),
                &[stat],
                protocol.percentile_method,
                protocol.summation,
                protocol.std,
            )[0]
        };
        let ci = stats::bootstrap_ci(&values, &statistic, b.resamples, b.confidence, b.seed)
            .map(|(lo, hi)| scale.map_or((lo, hi), |k| (lo * k, hi * k)));
        out.insert(
            protocol.stat_key(stat),
            ci.map_or(Value::Null, |(lo, hi)| json!([lo, hi])),
        );
    }
    Value::Object(out)
}
