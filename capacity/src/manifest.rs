//! The search manifest (`DIR/capacity.json`): everything needed to rebuild the report offline
//! besides the trial traces themselves, plus a log of the trials as they were judged live.

use crate::error::CapacityError;
use crate::slo::{number, Slo};
use crate::workload::{SearchSettings, Workload};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use tokentrace_recorder::server_info::ServerInfo;

/// File name of the manifest inside the search directory.
pub const MANIFEST_FILE: &str = "capacity.json";
/// File name of the report the live search writes next to it.
pub const REPORT_FILE: &str = "report.json";
/// The `kind` that identifies a capacity search manifest.
pub const MANIFEST_KIND: &str = "tokentrace-capacity-search";

/// The keys of the report's `experiment` block, in the order of the user's own report
/// (fixtures/capacity-slo-report.json); each is null when neither a label nor the server
/// says it.
pub const EXPERIMENT_KEYS: [&str; 11] = [
    "image_tag",
    "image_digest",
    "model",
    "checkpoint",
    "hardware",
    "driver",
    "kernel",
    "tensor_parallelism",
    "context_length",
    "physical_token_pool",
    "speculative_mode",
];

/// The keys of the experiment's `speculative_mode` object, in the report's order.
pub const SPECULATIVE_KEYS: [&str; 4] = ["algorithm", "steps", "topk", "draft_tokens"];

/// One trial as the live search judged it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialLogEntry {
    /// The workload (`2048/512`).
    pub workload: String,
    /// The level.
    pub concurrency: u32,
    /// The trial number.
    pub trial: u32,
    /// The trace, relative to the search directory.
    pub trace: String,
    /// The live verdict.
    pub passed: bool,
}

/// The search's description.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchManifest {
    /// Always [`MANIFEST_KIND`].
    pub kind: String,
    /// Version of this manifest's layout.
    pub schema_version: u32,
    /// tokentrace version that ran the search.
    pub tool_version: String,
    /// Command line with secrets removed.
    pub argv: Vec<String>,
    /// Target base URL.
    pub base_url: String,
    /// Model name sent.
    pub model: String,
    /// Workloads, in search order.
    pub workloads: Vec<Workload>,
    /// SLO specs in canonical form (all must hold).
    pub slos: Vec<String>,
    /// The protocol whose definitions the SLOs and the report use.
    pub protocol: String,
    /// Sampling temperature sent.
    pub temperature: f64,
    /// Bounds, trials, requests and budget.
    pub settings: SearchSettings,
    /// How the server's cache was treated between trials (free text for the report).
    pub cache_policy: String,
    /// Experiment description for the report (labels, nested by dotted keys).
    pub experiment: Map<String, Value>,
    /// What the server said about itself before the first trial (absent in older searches
    /// and when no description endpoint answered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_info: Option<ServerInfo>,
    /// Every trial run, in order, with its live verdict.
    pub trials: Vec<TrialLogEntry>,
}

impl SearchManifest {
    /// The SLOs, parsed.
    pub fn parsed_slos(&self) -> Result<Vec<Slo>, CapacityError> {
        crate::slo::parse_stored(&self.slos)
    }

    /// The path of a trial's trace relative to the search directory:
    /// `<isl>x<osl>/c<N>/trial<k>.ttrace`.
    pub fn trial_path(workload: &Workload, concurrency: u32, trial: u32) -> PathBuf {
        Path::new(&workload.dir_name())
            .join(format!("c{concurrency}"))
            .join(format!("trial{trial}.ttrace"))
    }

    /// Reads `DIR/capacity.json`.
    pub fn load(dir: &Path) -> Result<SearchManifest, CapacityError> {
        let path = dir.join(MANIFEST_FILE);
        let text = std::fs::read_to_string(&path).map_err(|e| CapacityError::io(&path, e))?;
        let manifest: SearchManifest =
            serde_json::from_str(&text).map_err(|e| CapacityError::Directory {
                path: path.clone(),
                why: format!("not a capacity search manifest: {e}"),
            })?;
        if manifest.kind != MANIFEST_KIND {
            return Err(CapacityError::Directory {
                path,
                why: format!("kind is `{}`, expected `{MANIFEST_KIND}`", manifest.kind),
            });
        }
        Ok(manifest)
    }

    /// Writes `DIR/capacity.json` atomically (temporary file, then rename), so a crash never
    /// leaves half a manifest.
    pub fn save(&self, dir: &Path) -> Result<(), CapacityError> {
        let path = dir.join(MANIFEST_FILE);
        let tmp = dir.join(format!("{MANIFEST_FILE}.tmp"));
        let mut text =
            serde_json::to_string_pretty(self).map_err(|e| CapacityError::Directory {
                path: path.clone(),
                why: e.to_string(),
            })?;
        text.push('\n');
        std::fs::write(&tmp, text).map_err(|e| CapacityError::io(&tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| CapacityError::io(&path, e))
    }

    /// The report's `experiment` block: every key of [`EXPERIMENT_KEYS`] in that order, each
    /// from its `--label` when given, else from the server's own description
    /// ([`ServerInfo`]), else null (`model` falls back to the model sent); then the other
    /// labels in the order given.
    pub fn experiment_block(&self) -> Value {
        let server = self.server_info.clone().unwrap_or_default();
        let mut block = Map::new();
        for key in EXPERIMENT_KEYS {
            let label = self.experiment.get(key);
            let value = match key {
                "speculative_mode" => speculative_mode(label, &server),
                _ => label
                    .cloned()
                    .or_else(|| from_server(key, &server))
                    .or_else(|| (key == "model").then(|| json!(self.model)))
                    .unwrap_or(Value::Null),
            };
            block.insert(key.into(), value);
        }
        for (key, value) in &self.experiment {
            if !block.contains_key(key) {
                block.insert(key.clone(), value.clone());
            }
        }
        Value::Object(block)
    }

    /// Which definitions the report uses, for the method block's `version`.
    fn method_version(&self) -> String {
        let tool = &self.tool_version;
        if self.protocol == crate::judge::DEFAULT_PROTOCOL {
            format!("aiperf definitions (tokentrace {tool})")
        } else {
            format!(
                "SLOs judged under {} definitions, metric blocks under aiperf definitions (tokentrace {tool})",
                self.protocol
            )
        }
    }

    /// The report's method block (the fixture's `aiperf` key): how every trial was run.
    pub fn method_block(&self) -> Value {
        let s = &self.settings;
        json!({
            "version": self.method_version(),
            "arrival_pattern": "closed-loop concurrency burst",
            "streaming": true,
            "server_token_count": true,
            "temperature": number(self.temperature),
            "ignore_eos": true,
            "warmups_per_trial": s.warmups_per_trial,
            "measured_requests_per_trial": s.measured_requests_per_trial,
            "independent_trials_per_boundary_side": s.trials_per_level,
            "cache_policy": self.cache_policy,
        })
    }
}

/// The experiment value the server's description gives for `key`, if any.
fn from_server(key: &str, server: &ServerInfo) -> Option<Value> {
    match key {
        "tensor_parallelism" => server.tensor_parallelism.map(Value::from),
        "context_length" => server.context_length.map(Value::from),
        "physical_token_pool" => server.physical_token_pool.map(Value::from),
        _ => None,
    }
}

/// `{algorithm, steps, topk, draft_tokens}`: each from a `speculative_mode.KEY` label, else
/// from the server, else null. A `speculative_mode` label that is not an object is kept as
/// given.
fn speculative_mode(label: Option<&Value>, server: &ServerInfo) -> Value {
    let labels = match label {
        Some(Value::Object(map)) => map.clone(),
        Some(other) => return other.clone(),
        None => Map::new(),
    };
    let served = [
        server.speculative_algorithm.clone().map(Value::from),
        server.speculative_steps.map(Value::from),
        server.speculative_topk.map(Value::from),
        server.speculative_draft_tokens.map(Value::from),
    ];
    let mut mode = Map::new();
    for (key, from_server) in SPECULATIVE_KEYS.iter().zip(served) {
        let value = labels.get(*key).cloned().or(from_server);
        mode.insert(key.to_string(), value.unwrap_or(Value::Null));
    }
    for (key, value) in labels {
        mode.entry(key).or_insert(value);
    }
    Value::Object(mode)
}

/// Turns `--label key=value` pairs into the experiment map: values that parse as JSON numbers
/// or booleans become such, a JSON-quoted value (`"17012946"`) a string of what is inside the
/// quotes, everything else a string as given; dotted keys nest
/// (`speculative_mode.steps=7` becomes `"speculative_mode": {"steps": 7}`).
pub fn experiment_from_labels(labels: &[(String, String)]) -> Map<String, Value> {
    let mut map = Map::new();
    for (key, raw) in labels {
        let value = match serde_json::from_str::<Value>(raw) {
            Ok(v @ (Value::Number(_) | Value::Bool(_) | Value::String(_))) => v,
            _ => Value::String(raw.clone()),
        };
        let parts: Vec<&str> = key.split('.').filter(|p| !p.is_empty()).collect();
        insert_path(&mut map, &parts, value);
    }
    map
}

fn insert_path(map: &mut Map<String, Value>, parts: &[&str], value: Value) {
    match parts {
        [] => {}
        [leaf] => {
            map.insert(leaf.to_string(), value);
        }
        [head, rest @ ..] => {
            let entry = map
                .entry(head.to_string())
                .or_insert_with(|| Value::Object(Map::new()));
            if !entry.is_object() {
                *entry = Value::Object(Map::new());
            }
            if let Value::Object(inner) = entry {
                insert_path(inner, rest, value);
            }
        }
    }
}

/// A manifest for tests: a search of `model` at `http://127.0.0.1:1/v1` under AIPerf's
/// definitions, with no workload, SLO, label or trial yet.
#[cfg(test)]
pub(crate) fn test_manifest(model: &str) -> SearchManifest {
    SearchManifest {
        kind: MANIFEST_KIND.into(),
        schema_version: 1,
        tool_version: "0.1.0".into(),
        argv: vec![],
        base_url: "http://127.0.0.1:1/v1".into(),
        model: model.into(),
        workloads: vec![],
        slos: vec![],
        protocol: "aiperf".into(),
        temperature: 0.0,
        settings: SearchSettings::default(),
        cache_policy: "not flushed".into(),
        experiment: experiment_from_labels(&[]),
        trials: vec![],
        server_info: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_nest_and_keep_types() {
        let labels: Vec<(String, String)> = [
            ("image_tag", "sglang:latest"),
            ("tensor_parallelism", "4"),
            ("speculative_mode.algorithm", "EAGLE/MTP"),
            ("speculative_mode.steps", "7"),
            ("driver", "\"17012946\""),
            ("hardware", "4 x GPU, 32656 MiB each"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let map = experiment_from_labels(&labels);
        assert_eq!(
            Value::Object(map).to_string(),
            r#"{"image_tag":"sglang:latest","tensor_parallelism":4,"speculative_mode":{"algorithm":"EAGLE/MTP","steps":7},"driver":"17012946","hardware":"4 x GPU, 32656 MiB each"}"#
        );
    }

    fn search_manifest(labels: &[(&str, &str)], server_info: Option<ServerInfo>) -> SearchManifest {
        let labels: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        SearchManifest {
            cache_policy: String::new(),
            experiment: experiment_from_labels(&labels),
            server_info,
            ..test_manifest("sent/model")
        }
    }

    #[test]
    fn the_experiment_has_every_key_of_the_report_null_when_unknown() {
        let block = search_manifest(&[], None).experiment_block();
        let keys: Vec<&String> = block.as_object().unwrap().keys().collect();
        assert_eq!(keys, EXPERIMENT_KEYS);
        assert_eq!(block["model"], json!("sent/model"));
        assert_eq!(block["image_tag"], Value::Null);
        assert_eq!(block["context_length"], Value::Null);
        assert_eq!(
            block["speculative_mode"],
            json!({"algorithm": null, "steps": null, "topk": null, "draft_tokens": null})
        );
    }

    #[test]
    fn the_server_fills_what_labels_leave_open() {
        let server = ServerInfo {
            context_length: Some(262144),
            tensor_parallelism: Some(4),
            physical_token_pool: Some(200000),
            speculative_algorithm: Some("EAGLE".into()),
            speculative_steps: Some(7),
            speculative_topk: Some(1),
            speculative_draft_tokens: Some(8),
            ..ServerInfo::default()
        };
        let labels = [
            ("image_tag", "sglang:latest"),
            ("physical_token_pool", "262144"),
            ("speculative_mode.algorithm", "EAGLE/MTP"),
            ("gpu_clock", "locked"),
        ];
        let block = search_manifest(&labels, Some(server)).experiment_block();
        assert_eq!(block["image_tag"], json!("sglang:latest"));
        assert_eq!(block["tensor_parallelism"], json!(4));
        assert_eq!(block["context_length"], json!(262144));
        // A label wins over the server.
        assert_eq!(block["physical_token_pool"], json!(262144));
        assert_eq!(
            block["speculative_mode"],
            json!({"algorithm": "EAGLE/MTP", "steps": 7, "topk": 1, "draft_tokens": 8})
        );
        // Other labels follow the report's keys.
        let keys: Vec<&String> = block.as_object().unwrap().keys().collect();
        assert_eq!(keys.len(), EXPERIMENT_KEYS.len() + 1);
        assert_eq!(keys.last().unwrap().as_str(), "gpu_clock");
        // The search manifest keeps the server's description and reads back without it.
        let m = search_manifest(&[], Some(ServerInfo::default()));
        let text = serde_json::to_string(&m).unwrap();
        let mut old: Value = serde_json::from_str(&text).unwrap();
        old.as_object_mut().unwrap().remove("server_info");
        let back: SearchManifest = serde_json::from_value(old).unwrap();
        assert_eq!(back.server_info, None);
    }

    #[test]
    fn trial_paths_follow_the_layout() {
        let w = Workload {
            isl: 2048,
            osl: 512,
        };
        assert_eq!(
            SearchManifest::trial_path(&w, 12, 3),
            Path::new("2048x512/c12/trial3.ttrace")
        );
    }
}
