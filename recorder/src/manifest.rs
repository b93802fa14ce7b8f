//! The run manifest: what was run, against what, with which settings. Secrets are removed from
//! the command line before it is stored; the API key itself is never part of the config's
//! serializable state.

use crate::config::{Load, PromptSource, RecordConfig};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use tokentrace_format::Manifest;

/// Header names whose values are secrets.
const SECRET_HEADER_WORDS: [&str; 6] = [
    "authorization",
    "api-key",
    "apikey",
    "token",
    "cookie",
    "secret",
];

/// Whether a header with this name carries a secret.
pub fn is_secret_header(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    SECRET_HEADER_WORDS.iter().any(|w| name.contains(w))
}

/// The command line with secret header values and any literal occurrence of the API key removed.
pub fn redact_argv(argv: &[String], api_key: Option<&str>) -> Vec<String> {
    let mut out = Vec::with_capacity(argv.len());
    let mut header_value_next = false;
    for arg in argv {
        let mut arg = arg.clone();
        let value = if header_value_next {
            header_value_next = false;
            Some(arg.clone())
        } else if arg == "--header" || arg == "-H" {
            header_value_next = true;
            None
        } else {
            arg.strip_prefix("--header=").map(str::to_owned)
        };
        if let Some(value) = value {
            if let Some((name, _)) = value.split_once(':') {
                if is_secret_header(name) {
                    let redacted = format!("{name}: <redacted>");
                    arg = if arg.starts_with("--header=") {
                        format!("--header={redacted}")
                    } else {
                        redacted
                    };
                }
            }
        }
        if let Some(key) = api_key.filter(|k| !k.is_empty()) {
            if arg.contains(key) {
                arg = arg.replace(key, "<redacted>");
            }
        }
        out.push(arg);
    }
    out
}

/// Build the manifest of a run. `calibrated_words` is the synthetic prompt length chosen by
/// calibration (None for prompt files).
pub fn build(
    config: &RecordConfig,
    calibrated_words: Option<u32>,
    start_realtime_ns: u64,
) -> Manifest {
    let mut workload = BTreeMap::new();
    match &config.prompts {
        PromptSource::Synthetic { input_tokens } => {
            workload.insert("prompt_source".into(), json!("synthetic"));
            workload.insert("input_tokens".into(), json!(input_tokens));
            workload.insert("synthetic_words".into(), json!(calibrated_words));
        }
        PromptSource::File(path) => {
            workload.insert("prompt_source".into(), json!("file"));
            workload.insert("prompts_file".into(), json!(path.display().to_string()));
        }
    }
    workload.insert("max_tokens".into(), json!(config.max_tokens));
    workload.insert("ignore_eos".into(), json!(config.ignore_eos));
    workload.insert("include_usage".into(), json!(config.include_usage));
    workload.insert(
        "continuous_usage_stats".into(),
        json!(config.continuous_usage),
    );
    workload.insert("capture".into(), json!(config.capture.name()));
    workload.insert(
        "extra_body".into(),
        config.extra_body.clone().map_or(Value::Null, Value::Object),
    );
    let mut load = BTreeMap::new();
    match config.load {
        Load::Closed { concurrency } => {
            load.insert("mode".into(), json!("closed"));
            load.insert("concurrency".into(), json!(concurrency));
        }
        Load::Open { rate, arrival } => {
            load.insert("mode".into(), json!("open"));
            load.insert("rate".into(), json!(rate));
            let (name, burstiness) = match arrival {
                crate::config::Arrival::Constant => ("constant", None),
                crate::config::Arrival::Poisson => ("poisson", None),
                crate::config::Arrival::Gamma { burstiness } => ("gamma", Some(burstiness)),
            };
            load.insert("arrival".into(), json!(name));
            load.insert("burstiness".into(), json!(burstiness));
        }
    }
    load.insert("requests".into(), json!(config.requests));
    load.insert("warmup".into(), json!(config.warmup));
    load.insert(
        "duration_s".into(),
        json!(config.duration.map(|d| d.as_secs_f64())),
    );
    load.insert(
        "timeout_s".into(),
        json!(config.timeout.map(|d| d.as_secs_f64())),
    );
    load.insert(
        "ttft_timeout_s".into(),
        json!(config.ttft_timeout.map(|d| d.as_secs_f64())),
    );
    load.insert(
        "checkpoint_every_s".into(),
        json!(config.checkpoint_every.map(|d| d.as_secs_f64())),
    );
    load.insert("zstd_level".into(), json!(config.zstd_level));
    load.insert("trial".into(), json!(config.trial));
    let mut extra = BTreeMap::new();
    extra.insert("tls_insecure".into(), json!(config.insecure));
    extra.insert(
        "ca_cert".into(),
        json!(config.ca_cert.as_ref().map(|p| p.display().to_string())),
    );
    extra.insert(
        "http".into(),
        json!(format!("{:?}", config.http).to_lowercase()),
    );
    extra.insert("line_limit".into(), json!(config.line_limit));
    extra.insert("api_key_sent".into(), json!(config.api_key.is_some()));
    let header_names: Vec<String> = config.headers.iter().map(|(n, _)| n.clone()).collect();
    extra.insert("custom_header_names".into(), json!(header_names));
    extra.insert("scheduling".into(), crate::scheduling::describe());
    Manifest {
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        argv: redact_argv(&config.argv, config.api_key.as_deref()),
        base_url: config.base_url.clone(),
        api: config.api.name().to_string(),
        model: config.model.clone(),
        workload,
        load,
        seed: config.seed,
        labels: config.labels.clone(),
        start_realtime_ns,
        extra,
        // The request id header is set by the run once it is decided.
        ..Manifest::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn secret_headers_and_key_are_redacted() {
        let argv = args(&[
            "tokentrace",
            "record",
            "--header",
            "Authorization: Bearer sk-123",
            "--header=X-Api-Key: abc",
            "--header",
            "X-Tier: gold",
            "--label",
            "note=sk-123",
        ]);
        let out = redact_argv(&argv, Some("sk-123"));
        let joined = out.join(" ");
        assert!(!joined.contains("sk-123"), "{joined}");
        assert!(!joined.contains("abc"), "{joined}");
        assert!(joined.contains("X-Tier: gold"));
        assert!(joined.contains("Authorization: <redacted>"));
        assert!(joined.contains("--header=X-Api-Key: <redacted>"));
    }

    #[test]
    fn manifest_records_settings_and_no_key() {
        let mut config = crate::config::RecordConfig::new("http://h/v1", "m", "o".into());
        config.api_key = Some("sk-secret".into());
        config.insecure = true;
        config.labels.insert("engine".into(), "vllm".into());
        let m = build(&config, Some(120), 5);
        assert_eq!(m.extra["tls_insecure"], json!(true));
        assert_eq!(m.workload["synthetic_words"], json!(120));
        assert_eq!(m.labels["engine"], "vllm");
        assert_eq!(m.extra["scheduling"], crate::scheduling::describe());
        assert_eq!(
            m.load["zstd_level"],
            json!(crate::config::DEFAULT_ZSTD_LEVEL)
        );
        assert!(!serde_json::to_string(&m).unwrap().contains("sk-secret"));
    }
}
