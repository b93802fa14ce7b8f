//! Splits the loaded traces into groups analyzed side by side (`--group-by`).

use crate::dataset::Dataset;

/// How traces are grouped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupBy {
    /// All traces together (trials or shards of one run).
    All,
    /// Each trace on its own.
    Trace,
    /// Traces sharing the value of a manifest label (`label:KEY`).
    Label(String),
}

impl GroupBy {
    /// Parses `trace`, `label:KEY` or `all`.
    pub fn parse(text: &str) -> Result<GroupBy, String> {
        match text {
            "all" | "none" => Ok(GroupBy::All),
            "trace" => Ok(GroupBy::Trace),
            other => match other.strip_prefix("label:") {
                Some(key) if !key.is_empty() => Ok(GroupBy::Label(key.to_string())),
                _ => Err(format!(
                    "--group-by {other}: expected trace, label:KEY or all"
                )),
            },
        }
    }
}

/// (group name, trace indices) in first-seen order.
pub fn groups(dataset: &Dataset, by: &GroupBy) -> Vec<(String, Vec<u32>)> {
    let mut out: Vec<(String, Vec<u32>)> = Vec::new();
    for (i, trace) in dataset.traces.iter().enumerate() {
        let name = match by {
            GroupBy::All => "all".to_string(),
            GroupBy::Trace => trace.label.clone(),
            GroupBy::Label(key) => format!(
                "{key}={}",
                trace
                    .manifest
                    .labels
                    .get(key)
                    .map_or("(unset)", String::as_str)
            ),
        };
        match out.iter_mut().find(|(n, _)| *n == name) {
            Some((_, traces)) => traces.push(i as u32),
            None => out.push((name, vec![i as u32])),
        }
    }
    out
}
