//! A flat report: the layout of `vllm bench serve --save-result` and SGLang's JSONL line.

use crate::analysis::Analysis;
use crate::methodology;
use crate::protocol::Stat;
use crate::summary::{self, number};
use serde_json::{json, Map, Value};

/// The whole report of one analysis: protocol, aggregates, then each metric's statistics
/// under its key template, in protocol order.
pub fn report(analysis: &Analysis<'_>) -> Value {
    let protocol = analysis.protocol;
    let mut out = Map::new();
    out.insert("protocol".into(), json!(protocol.name));
    out.insert("protocol_version".into(), json!(protocol.version));
    let traces: Vec<&str> = analysis
        .traces
        .iter()
        .map(|&t| analysis.dataset.traces[t as usize].label.as_str())
        .collect();
    out.insert("traces".into(), json!(traces));
    // Only when there is something to say, so a clean run keeps the tool's own layout.
    if analysis.run.missing_done > 0 {
        out.insert("missing_done".into(), json!(analysis.run.missing_done));
    }
    if !analysis.run.notes.is_empty() {
        out.insert("notes".into(), summary::notes_json(&analysis.run.notes));
    }
    for (key, value) in summary::aggregates(protocol, analysis, &analysis.run) {
        out.insert(key, value);
    }
    for m in summary::metrics(protocol, analysis) {
        let def = &protocol.metrics[m.metric];
        for (stat, value) in m.stats {
            let v = match stat {
                Stat::Samples => json!(value.unwrap_or(0.0) as u64),
                _ => number(value),
            };
            out.insert(protocol.flat_key(def, stat), v);
        }
    }
    let methodology: Map<String, Value> = methodology::timing_methodology(protocol)
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    out.insert("timing_methodology".into(), Value::Object(methodology));
    Value::Object(out)
}
