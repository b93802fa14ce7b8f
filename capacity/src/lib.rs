//! Capacity search under latency SLOs: for each workload, the highest concurrency at which
//! every trial meets every SLO, found by doubling and then bisecting. Every trial is recorded
//! as its own trace, so the whole report can be rebuilt offline under another SLO or under
//! another protocol's definitions.

pub mod correctness;
pub mod definitions;
pub mod error;
pub mod hooks;
pub mod judge;
pub mod live;
pub mod manifest;
pub mod metrics;
pub mod reanalyze;
pub mod report;
pub mod search;
pub mod slo;
pub mod workload;

pub use error::CapacityError;
pub use hooks::TrialHooks;
pub use live::{run_capacity, CapacityConfig};
pub use reanalyze::reanalyze;
pub use search::{run_search, Bracket, SearchOutcome, TrialRun, TrialRunner, TrialSpec};
pub use slo::{Slo, TrialSlo};
pub use workload::{SearchSettings, Workload};

/// A fixture file of the workspace's `tests/fixtures`.
#[cfg(test)]
pub(crate) fn fixture_path(name: &str) -> std::path::PathBuf {
    let crate_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    crate_dir.join("../tests/fixtures").join(name)
}
