//! What an importer keeps from the tool that measured a run, as typed manifest fields: the
//! window the tool divided its throughputs by, and the token counts of the tool's own
//! tokenizer. The analyzer reads these to reproduce the tool's figures.
//!
//! Traces imported before these fields existed kept the same facts under importer-private
//! `extra` keys; [`Manifest::window`] and [`Manifest::token_counts`] read those too, so old
//! imports keep measuring the same.

use crate::types::Manifest;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// The span a source tool divided its throughputs by.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeasurementWindow {
    /// The tool and what the span is (`aiperf profiling phase`, `vllm duration`).
    pub source: String,
    /// Length of the span, ns.
    pub duration_ns: u64,
    /// Wall-clock start (ns since the Unix epoch), when the tool recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_realtime_ns: Option<u64>,
    /// Wall-clock end, when the tool recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_realtime_ns: Option<u64>,
}

/// Token counts a client tokenizer gave each request (AIPerf's ISL/OSL, vLLM's input and
/// output lengths), keyed by trace request id.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClientTokenCounts {
    /// The tool that counted (`aiperf`, `vllm`).
    pub source: String,
    /// Its tokenizer, when it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<String>,
    /// Counts per request id.
    pub per_request: BTreeMap<u64, RequestTokenCounts>,
}

/// One request's client-side token counts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestTokenCounts {
    /// Input tokens as the tool counted them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u32>,
    /// Output tokens as the tool counted them (what it divided ITL by).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u32>,
    /// The tool's other per-request counts, under its own names.
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

impl Manifest {
    /// The source tool's measurement window: the typed field, else what imports made before
    /// it kept in `extra` (`aiperf.phase_window.profiling`, `vllm.duration`).
    pub fn window(&self) -> Option<MeasurementWindow> {
        if let Some(window) = &self.measurement_window {
            return Some(window.clone());
        }
        if let Some(w) = self
            .extra
            .get("aiperf")
            .and_then(|a| a.pointer("/phase_window/profiling"))
        {
            let start = w.get("start_realtime_ns")?.as_u64()?;
            let end = w.get("end_realtime_ns")?.as_u64()?;
            return (end > start).then(|| MeasurementWindow {
                source: "aiperf profiling phase".into(),
                duration_ns: end - start,
                start_realtime_ns: Some(start),
                end_realtime_ns: Some(end),
            });
        }
        let seconds = self.extra.get("vllm")?.get("duration")?.as_f64()?;
        (seconds > 0.0).then(|| MeasurementWindow {
            source: "vllm duration".into(),
            duration_ns: (seconds * 1e9).round() as u64,
            start_realtime_ns: None,
            end_realtime_ns: None,
        })
    }

    /// The client tokenizer's counts: the typed field, else the `extra.client_token_counts`
    /// of earlier imports (`per_request["<id>"]` with `output_tokens` or
    /// `output_sequence_length`, and `input_tokens` or `input_sequence_length`).
    pub fn token_counts(&self) -> Option<ClientTokenCounts> {
        if let Some(counts) = &self.client_token_counts {
            return Some(counts.clone());
        }
        let legacy = self.extra.get("client_token_counts")?;
        let count = |v: &Value, keys: [&str; 2]| {
            keys.iter()
                .find_map(|k| v.get(*k)?.as_u64())
                .and_then(|n| u32::try_from(n).ok())
        };
        let per_request = legacy
            .get("per_request")?
            .as_object()?
            .iter()
            .filter_map(|(id, v)| {
                let counts = RequestTokenCounts {
                    input_tokens: count(v, ["input_tokens", "input_sequence_length"]),
                    output_tokens: count(v, ["output_tokens", "output_sequence_length"]),
                    other: BTreeMap::new(),
                };
                Some((id.parse().ok()?, counts))
            })
            .collect();
        Some(ClientTokenCounts {
            source: legacy
                .get("source")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .into(),
            tokenizer: legacy
                .get("tokenizer")
                .and_then(Value::as_str)
                .map(String::from),
            per_request,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn imports_made_before_the_typed_fields_still_give_their_window_and_counts() {
        let mut m = Manifest::default();
        m.extra.insert(
            "aiperf".into(),
            json!({"phase_window": {"profiling": {"start_realtime_ns": 10, "end_realtime_ns": 40}}}),
        );
        m.extra.insert(
            "client_token_counts".into(),
            json!({"source": "aiperf", "tokenizer": "t", "per_request":
                   {"3": {"output_sequence_length": 7, "input_sequence_length": 5}, "x": {}}}),
        );
        assert_eq!(m.window().unwrap().duration_ns, 30);
        let counts = m.token_counts().unwrap();
        assert_eq!(counts.per_request.len(), 1);
        assert_eq!(counts.per_request[&3].output_tokens, Some(7));
        assert_eq!(counts.per_request[&3].input_tokens, Some(5));

        let mut v = Manifest::default();
        v.extra.insert("vllm".into(), json!({"duration": 1.5}));
        assert_eq!(v.window().unwrap().duration_ns, 1_500_000_000);
    }

    #[test]
    fn the_typed_fields_win_and_round_trip() {
        let mut m = Manifest::default();
        m.extra.insert("vllm".into(), json!({"duration": 9.0}));
        m.measurement_window = Some(MeasurementWindow {
            source: "vllm duration".into(),
            duration_ns: 2,
            start_realtime_ns: None,
            end_realtime_ns: None,
        });
        assert_eq!(m.window().unwrap().duration_ns, 2);
        let back: Manifest = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
        assert_eq!(back, m);
    }
}
