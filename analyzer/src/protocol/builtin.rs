//! The protocols that ship with tokentrace, each written as TOML beside this file.

use super::{Protocol, ProtocolError};

/// (file name, text) of every built-in protocol, in listing order.
const SOURCES: &[(&str, &str)] = &[
    (
        "tokentrace-v1.toml",
        include_str!("builtin/tokentrace-v1.toml"),
    ),
    ("capacity-v3.toml", include_str!("builtin/capacity-v3.toml")),
    (
        "capacity-v4-reasoning.toml",
        include_str!("builtin/capacity-v4-reasoning.toml"),
    ),
    ("aiperf.toml", include_str!("builtin/aiperf.toml")),
    ("aiperf-0.10.toml", include_str!("builtin/aiperf-0.10.toml")),
    ("vllm.toml", include_str!("builtin/vllm.toml")),
    ("sglang.toml", include_str!("builtin/sglang.toml")),
    ("guidellm.toml", include_str!("builtin/guidellm.toml")),
];

/// Every built-in protocol, parsed.
pub fn all() -> Result<Vec<Protocol>, ProtocolError> {
    SOURCES
        .iter()
        .map(|(file, text)| Protocol::from_toml(text, file))
        .collect()
}

/// The built-in protocol called `name`.
pub fn find(name: &str) -> Result<Protocol, ProtocolError> {
    let all = all()?;
    let known = all
        .iter()
        .map(|p| p.name.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    all.iter()
        .find(|p| p.name == name)
        .cloned()
        .ok_or_else(|| ProtocolError::Unknown {
            name: name.to_string(),
            known,
        })
}

/// The protocol to use: the one defined in `file` when given (its name must match `name` when
/// both are given), else the built-in `name`.
pub fn resolve(
    name: Option<&str>,
    file: Option<&std::path::Path>,
) -> Result<Protocol, ProtocolError> {
    match file {
        Some(path) => {
            let origin = path.display().to_string();
            let text = std::fs::read_to_string(path).map_err(|e| ProtocolError::Parse {
                path: origin.clone(),
                message: e.to_string(),
            })?;
            let protocol = Protocol::from_toml(&text, &origin)?;
            match name {
                Some(n) if n != protocol.name => Err(ProtocolError::Unknown {
                    name: n.to_string(),
                    known: format!("{} (in {origin})", protocol.name),
                }),
                _ => Ok(protocol),
            }
        }
        None => find(name.unwrap_or(DEFAULT)),
    }
}

/// The protocol used when none is named.
pub const DEFAULT: &str = "tokentrace-v1";

#[cfg(test)]
mod tests {
    use crate::facts::summarize_record;
    use crate::facts::tests::{chunk, record};
    use crate::quantity::{value, EvalContext};
    use tokentrace_format::Channel;

    /// The value of metric `name` of built-in `protocol` for a request sent at 1 µs, ended at
    /// 9 µs, with 100 usage prompt tokens and 128 planned input tokens.
    fn metric_value(protocol: &str, name: &str) -> Option<f64> {
        let p = super::find(protocol).unwrap();
        let mut r = record(vec![
            chunk(3_000, Channel::Content, 3, None),
            chunk(5_000, Channel::Content, 3, None),
        ]);
        r.meta.usage.prompt_tokens = Some(100);
        r.meta.planned_input_tokens = Some(128);
        let f = summarize_record(0, &r, p.chunk_rules(), None);
        let def = p.metrics.iter().find(|m| m.name == name).unwrap();
        let cx = EvalContext::new(&p, &[]);
        value(&f, &def.quantity, &cx)
    }

    #[test]
    fn guidellm_request_latency_is_in_seconds_under_its_own_key() {
        // GenerativeRequestStats.request_latency = request_end - request_start, in seconds.
        assert_eq!(metric_value("guidellm", "request_latency"), Some(8e-6));
    }

    #[test]
    fn aiperf_input_sequence_length_is_the_client_tokenizer_count_not_usage() {
        // InputSequenceLengthMetric reads record.input_token_count (AIPerf's tokenizer).
        assert_eq!(metric_value("aiperf", "input_sequence_length"), Some(128.0));
    }

    #[test]
    fn every_builtin_parses_and_round_trips_through_toml() {
        for p in super::all().unwrap() {
            let again = super::Protocol::from_toml(&p.to_toml(), "round-trip").unwrap();
            assert_eq!(again, p, "{}", p.name);
        }
    }
}
