//! The capacity report: the shape of fixtures/capacity-slo-report.json, key for key.
//!
//! The bracket of each workload is computed from every recorded level judged under the SLOs
//! in force (not from the order the live search visited them), so a re-analysis under another
//! SLO uses every level that was measured. Under the SLOs of the live search this is exactly
//! the live search's bracket: every passing level it ran lies below every failing one.

use crate::correctness::Correctness;
use crate::manifest::SearchManifest;
use crate::metrics::{MinMax, TrialMetrics};
use crate::slo::{self, TrialSlo};
use crate::workload::Workload;
use serde_json::{json, Map, Value};

/// One recorded trial, measured and judged.
#[derive(Debug, Clone)]
pub struct TrialData {
    /// 1-based trial number within its level.
    pub trial: u32,
    /// The metric values.
    pub metrics: TrialMetrics,
    /// The correctness counts.
    pub correctness: Correctness,
    /// True if every SLO held.
    pub passed: bool,
}

impl TrialData {
    /// Judges a measured trial: it passes when every SLO holds and no request failed or was
    /// cancelled (a server shedding load must not pass on its few successes).
    /// `slos_hold` is the protocol's verdict on the SLOs.
    pub fn judge(
        trial: u32,
        metrics: TrialMetrics,
        correctness: Correctness,
        slos_hold: bool,
    ) -> TrialData {
        let clean = correctness.errors == 0 && !correctness.cancelled;
        let passed = clean && slos_hold;
        TrialData {
            trial,
            metrics,
            correctness,
            passed,
        }
    }

    fn to_json(&self) -> Value {
        let mut block = self.metrics.to_json();
        block.insert("correctness".into(), self.correctness.trial_json());
        block.insert("trial".into(), json!(self.trial));
        Value::Object(block)
    }
}

/// Every recorded trial of one level, by trial number.
#[derive(Debug, Clone)]
pub struct RecordedLevel {
    /// The concurrency.
    pub concurrency: u32,
    /// Its trials, sorted by trial number.
    pub trials: Vec<TrialData>,
}

/// A level's verdict from its recorded trials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Every required trial recorded and passed.
    Pass,
    /// A recorded trial failed.
    Fail,
    /// All recorded trials passed but some were never recorded.
    Undetermined,
}

impl RecordedLevel {
    /// The verdict with `trials_per_level` trials required.
    pub fn verdict(&self, trials_per_level: u32) -> Verdict {
        if self.trials.iter().any(|t| !t.passed) {
            Verdict::Fail
        } else if self.trials.len() as u32 >= trials_per_level {
            Verdict::Pass
        } else {
            Verdict::Undetermined
        }
    }
}

/// The bracket of one workload and, when it is not resolved, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judgement {
    /// Highest passing level below the lowest failing one.
    pub maximum_passing: Option<u32>,
    /// Lowest failing level.
    pub first_failing: Option<u32>,
    /// None when the two are adjacent (or a search bound settles it); else what is missing.
    pub unresolved: Option<String>,
}

/// Judges the recorded levels of one workload.
pub fn judge_levels(levels: &[RecordedLevel], manifest: &SearchManifest) -> Judgement {
    let settings = &manifest.settings;
    let verdict = |l: &RecordedLevel| l.verdict(settings.trials_per_level);
    let first_failing = levels
        .iter()
        .filter(|l| verdict(l) == Verdict::Fail)
        .map(|l| l.concurrency)
        .min();
    let below_failing = |c: u32| match first_failing {
        Some(f) => c < f,
        None => true,
    };
    let maximum_passing = levels
        .iter()
        .filter(|l| verdict(l) == Verdict::Pass)
        .map(|l| l.concurrency)
        .filter(|c| below_failing(*c))
        .max();
    let resolved = match (maximum_passing, first_failing) {
        (Some(p), Some(f)) => f - p == 1,
        (Some(p), None) => p >= settings.max_concurrency,
        (None, Some(f)) => f <= settings.min_concurrency,
        (None, None) => false,
    };
    let unresolved = (!resolved).then(|| {
        let low = maximum_passing.map_or(settings.min_concurrency, |p| p + 1);
        let high = first_failing.map_or(settings.max_concurrency, |f| f - 1);
        let undetermined: Vec<String> = levels
            .iter()
            .filter(|l| verdict(l) == Verdict::Undetermined && l.concurrency <= high)
            .map(|l| l.concurrency.to_string())
            .collect();
        let mut why = format!("levels {low}..={high} were not all measured");
        if !undetermined.is_empty() {
            why.push_str(&format!(
                "; levels {} lack trials (record with --all-trials to judge every level later)",
                undetermined.join(", ")
            ));
        }
        why
    });
    Judgement {
        maximum_passing,
        first_failing,
        unresolved,
    }
}

/// Everything measured for one workload.
#[derive(Debug, Clone)]
pub struct WorkloadData {
    /// The workload.
    pub workload: Workload,
    /// Its recorded levels, sorted by concurrency.
    pub levels: Vec<RecordedLevel>,
}

/// Builds the whole report.
pub fn build_report(
    manifest: &SearchManifest,
    slos: &[TrialSlo],
    workloads: &[WorkloadData],
) -> Value {
    let mut total = Correctness::default();
    let mut blocks = Vec::new();
    for data in workloads {
        let judgement = judge_levels(&data.levels, manifest);
        let trials_at = |level: Option<u32>| -> &[TrialData] {
            level
                .and_then(|c| data.levels.iter().find(|l| l.concurrency == c))
                .map_or(&[], |l| l.trials.as_slice())
        };
        let passing = trials_at(judgement.maximum_passing);
        let failing = trials_at(judgement.first_failing);
        let mut prompt_tokens = MinMax::default();
        for trial in passing.iter().chain(failing) {
            prompt_tokens.merge(trial.metrics.server_prompt_tokens);
            total.add(&trial.correctness);
        }
        let mut block = Map::new();
        block.insert("label".into(), json!(data.workload.label()));
        block.insert("configured_isl".into(), json!(data.workload.isl));
        block.insert("configured_osl".into(), json!(data.workload.osl));
        block.insert("server_prompt_tokens".into(), prompt_tokens.to_json());
        block.insert(
            "maximum_passing_concurrency".into(),
            json!(judgement.maximum_passing),
        );
        block.insert(
            "first_failing_concurrency".into(),
            json!(judgement.first_failing),
        );
        let list =
            |trials: &[TrialData]| Value::Array(trials.iter().map(TrialData::to_json).collect());
        block.insert("passing_trials".into(), list(passing));
        block.insert("failing_trials".into(), list(failing));
        if let Some(why) = judgement.unresolved {
            block.insert("unresolved".into(), json!(why));
        }
        blocks.push(Value::Object(block));
    }
    let mut report = Map::new();
    report.insert("schema_version".into(), json!(1));
    report.insert("experiment".into(), manifest.experiment_block());
    report.insert("aiperf".into(), manifest.method_block());
    report.insert("slo".into(), slo::report_value(slos));
    report.insert("workloads".into(), Value::Array(blocks));
    report.insert("correctness_total".into(), total.total_json());
    Value::Object(report)
}

/// The report as written to disk: pretty JSON with a final newline.
pub fn to_pretty_string(report: &Value) -> String {
    let mut text = serde_json::to_string_pretty(report).unwrap_or_else(|_| "null".into());
    text.push('\n');
    text
}

#[cfg(test)]
#[path = "report_tests.rs"]
mod tests;
