//! The analyzer: replays traces offline and derives per-request facts, then metrics and
//! reports under a named protocol (capacity-v3, AIPerf, vLLM, …).
//!
//! The pipeline: [`dataset`] streams trace blocks into [`facts::RequestFacts`]; a
//! [`protocol::Protocol`] says which requests count and how each metric is computed
//! ([`quantity`]); [`summary`] reduces them with [`stats`]; [`report`] renders the result.

pub mod analysis;
pub mod compare;
pub mod dataset;
pub mod facts;
pub mod failures;
pub mod groups;
pub mod methodology;
pub mod objective;
pub mod protocol;
pub mod quantity;
pub mod report;
pub mod run_shards;
pub mod slo;
pub mod stats;
pub mod summary;
pub mod versus;
