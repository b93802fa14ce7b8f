//! Shard traces analyzed as one run: `analyze shard-*.ttrace` places every shard's times on
//! the lowest shard's clock through their real-time anchors (as `tokentrace merge` does), and
//! says when the run is partial. A merged trace that lacks shards says so too.

use crate::dataset::Dataset;
use tokentrace_format::reader::TraceReader;
use tokentrace_format::shards::{shift, ShardSet, ShardTrace};

/// Aligns the shard traces of `dataset` (when every trace is a shard of one run) and warns
/// about partial runs. Called once every trace is loaded.
pub fn align(dataset: &mut Dataset) {
    for trace in &mut dataset.traces {
        if let Some(merged) = trace.manifest.shards.as_ref().filter(|m| m.is_partial()) {
            trace
                .warnings
                .push(format!("partial run: {}", merged.describe()));
        }
    }
    let sharded = dataset
        .traces
        .iter()
        .filter(|t| t.manifest.shard.is_some())
        .count();
    if sharded == 0 {
        return;
    }
    if sharded < dataset.traces.len() {
        if let Some(first) = dataset.traces.first_mut() {
            first.warnings.push(
                "some traces are shards and some are not: each trace's times stay on its own clock"
                    .into(),
            );
        }
        return;
    }
    let interrupted: Vec<usize> = dataset
        .traces
        .iter()
        .map(|t| TraceReader::open(&t.path).map_or(0, |r| r.interrupted().len()))
        .collect();
    let set = {
        let parts: Vec<ShardTrace<'_>> = dataset
            .traces
            .iter()
            .zip(&interrupted)
            .map(|(t, &n)| ShardTrace {
                header: &t.header,
                manifest: &t.manifest,
                run_end: t.run_end.as_ref(),
                interrupted: n,
            })
            .collect();
        ShardSet::of(&parts)
    };
    let set = match set {
        Ok(set) => set,
        Err(err) => {
            if let Some(first) = dataset.traces.first_mut() {
                first.warnings.push(format!(
                    "the shards are not one run ({err}): each trace's times stay on its own clock"
                ));
            }
            return;
        }
    };
    for r in &mut dataset.requests {
        r.shift(set.offsets_ns[r.trace as usize]);
    }
    let base_anchor = dataset.traces[set.base].header.anchor;
    for (t, trace) in dataset.traces.iter_mut().enumerate() {
        let offset = set.offsets_ns[t];
        trace.header.anchor = base_anchor;
        if let Some(end) = trace.run_end.as_mut() {
            end.end_ns = shift(end.end_ns, offset);
        }
    }
    if set.merged.is_partial() {
        if let Some(first) = dataset.traces.first_mut() {
            first
                .warnings
                .push(format!("partial run: {}", set.merged.describe()));
        }
    }
}
