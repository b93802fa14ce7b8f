//! The live search: every trial is a recorder run in this process, written to
//! `DIR/<isl>x<osl>/c<N>/trial<k>.ttrace`, then measured and judged from that trace (the same
//! code re-analysis uses). The final report is a re-analysis of the directory, so re-running
//! it offline reproduces the report byte for byte.

use crate::error::CapacityError;
use crate::hooks::TrialHooks;
use crate::judge::Judge;
use crate::manifest::{SearchManifest, TrialLogEntry, MANIFEST_FILE, MANIFEST_KIND, REPORT_FILE};
use crate::reanalyze::{measure_trial, reanalyze};
use crate::report::{to_pretty_string, TrialData};
use crate::search::{run_search, Deadline, SearchObserver, TrialRun, TrialRunner, TrialSpec};
use crate::slo::Slo;
use crate::workload::{SearchSettings, Workload};
use serde_json::{json, Map, Value};
use std::path::PathBuf;
use tokentrace_recorder::manifest::redact_argv;
use tokentrace_recorder::{Load, ProgressMode, PromptSource, RecordConfig};

/// Everything a live search needs.
#[derive(Debug, Clone)]
pub struct CapacityConfig {
    /// The search directory (created; must not hold a search already).
    pub dir: PathBuf,
    /// Target, TLS, headers, API and seed for every trial; workload, load, output, trial and
    /// phase counts are set per trial.
    pub target: RecordConfig,
    /// Workloads, searched in order.
    pub workloads: Vec<Workload>,
    /// The SLOs; all must hold.
    pub slos: Vec<Slo>,
    /// Bounds, trials, requests, budget.
    pub settings: SearchSettings,
    /// Protocol the SLOs are judged under: `aiperf`, or any protocol the analyzer knows.
    pub protocol: String,
    /// Sampling temperature sent with every request.
    pub temperature: f64,
    /// Commands/URLs run before every trial.
    pub hooks: TrialHooks,
    /// Overrides the generated `cache_policy` sentence.
    pub cache_policy: Option<String>,
    /// The experiment block (from `--label key=value`).
    pub experiment: Map<String, Value>,
}

/// Runs the whole search and writes `DIR/capacity.json` and `DIR/report.json`; returns the
/// report.
pub fn run_capacity(
    config: &CapacityConfig,
    observer: &mut dyn SearchObserver,
) -> Result<Value, CapacityError> {
    config.settings.validate()?;
    let judge = Judge::new(&config.protocol, &config.slos)?;
    if config.workloads.is_empty() {
        return Err(CapacityError::BadSettings(
            "give at least one --workload".into(),
        ));
    }
    if config.slos.is_empty() {
        return Err(CapacityError::BadSettings("give at least one --slo".into()));
    }
    let dir = &config.dir;
    if dir.join(MANIFEST_FILE).exists() {
        return Err(CapacityError::Directory {
            path: dir.clone(),
            why: "already holds a capacity search; choose a new directory".into(),
        });
    }
    std::fs::create_dir_all(dir).map_err(|e| CapacityError::io(dir, e))?;
    let mut manifest = SearchManifest {
        kind: MANIFEST_KIND.into(),
        schema_version: 1,
        tool_version: env!("CARGO_PKG_VERSION").into(),
        argv: redact_argv(&config.target.argv, config.target.api_key.as_deref()),
        base_url: config.target.base_url.clone(),
        model: config.target.model.clone(),
        workloads: config.workloads.clone(),
        slos: config.slos.iter().map(Slo::to_string).collect(),
        protocol: config.protocol.clone(),
        temperature: config.temperature,
        settings: config.settings.clone(),
        cache_policy: config
            .cache_policy
            .clone()
            .unwrap_or_else(|| config.hooks.describe()),
        experiment: config.experiment.clone(),
        // What the server says about itself, read once before the first trial (bounded;
        // never fails the search). Every trial trace also keeps its own copy.
        server_info: tokentrace_recorder::server_info::fetch_blocking(&config.target),
        trials: Vec::new(),
    };
    manifest.save(dir)?;
    let deadline = Deadline::after(config.settings.time_budget);
    for workload in &config.workloads {
        let mut runner = LiveRunner {
            config,
            judge: &judge,
            manifest: &mut manifest,
        };
        run_search(
            &mut runner,
            *workload,
            &config.settings,
            &deadline,
            observer,
        )?;
    }
    let report = reanalyze(dir, None, None)?;
    let path = dir.join(REPORT_FILE);
    std::fs::write(&path, to_pretty_string(&report)).map_err(|e| CapacityError::io(&path, e))?;
    Ok(report)
}

/// Runs one trial with the recorder and judges its trace.
struct LiveRunner<'a> {
    config: &'a CapacityConfig,
    judge: &'a Judge,
    manifest: &'a mut SearchManifest,
}

impl LiveRunner<'_> {
    fn trial_config(&self, spec: &TrialSpec, output: PathBuf) -> RecordConfig {
        let settings = &self.config.settings;
        let mut rc = self.config.target.clone();
        rc.output = output;
        rc.requests = Some(u64::from(settings.measured_requests_per_trial));
        rc.warmup = u64::from(settings.warmups_per_trial);
        rc.duration = None;
        rc.prompts = PromptSource::Synthetic {
            input_tokens: spec.workload.isl,
        };
        rc.max_tokens = Some(spec.workload.osl);
        rc.ignore_eos = true;
        rc.include_usage = true;
        rc.load = Load::Closed {
            concurrency: spec.concurrency as usize,
        };
        rc.trial = spec.trial;
        rc.progress = ProgressMode::Off;
        rc.handle_ctrl_c = false;
        // Distinct prompts in every trial, reproducibly.
        rc.seed = self.config.target.seed
            ^ (u64::from(spec.workload.isl) << 40)
            ^ (u64::from(spec.workload.osl) << 20)
            ^ (u64::from(spec.concurrency) << 8)
            ^ u64::from(spec.trial);
        let mut body = rc.extra_body.take().unwrap_or_default();
        body.entry("temperature")
            .or_insert_with(|| json!(self.config.temperature));
        rc.extra_body = Some(body);
        let labels = &mut rc.labels;
        labels.insert("capacity.workload".into(), spec.workload.to_string());
        labels.insert("capacity.concurrency".into(), spec.concurrency.to_string());
        labels.insert("capacity.trial".into(), spec.trial.to_string());
        rc
    }
}

impl TrialRunner for LiveRunner<'_> {
    type Trial = TrialData;
    type Error = CapacityError;

    fn run_trial(&mut self, spec: &TrialSpec) -> Result<TrialRun<TrialData>, CapacityError> {
        let trial_error = |why: String| CapacityError::Trial {
            workload: spec.workload.to_string(),
            concurrency: spec.concurrency,
            trial: spec.trial,
            why,
        };
        let relative = SearchManifest::trial_path(&spec.workload, spec.concurrency, spec.trial);
        let path = self.config.dir.join(&relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| CapacityError::io(parent, e))?;
        }
        self.config
            .hooks
            .run(spec, &self.config.target)
            .map_err(trial_error)?;
        let record = self.trial_config(spec, path.clone());
        tokentrace_recorder::run(record).map_err(|e| trial_error(e.to_string()))?;
        let data = measure_trial(&path, &spec.workload, spec.trial, self.judge)?
            .ok_or_else(|| trial_error("the recorder left its trace unfinished".into()))?;
        self.manifest.trials.push(TrialLogEntry {
            workload: spec.workload.to_string(),
            concurrency: spec.concurrency,
            trial: spec.trial,
            trace: relative.to_string_lossy().into_owned(),
            passed: data.passed,
        });
        self.manifest.save(&self.config.dir)?;
        Ok(TrialRun::Measured {
            passed: data.passed,
            data,
        })
    }
}
