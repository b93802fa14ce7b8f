//! `tokentrace merge`: the shard traces of one run written as one trace on one clock (the
//! lowest shard's), every request kept — finished ones and those only checkpoints describe —
//! and what is missing named in the manifest (`shards`).

use crate::error::FormatError;
use crate::reader::TraceReader;
use crate::shards::{shift, MergedShards, ShardError, ShardSet, ShardTrace};
use crate::types::{RequestRecord, RunEnd};
use crate::writer::{TraceWriter, WriterConfig};
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The run end reason of a merged trace with every shard whole.
pub const MERGED_REASON: &str = "completed";
/// The prefix of the run end reason of a merged trace with shards missing or unfinished.
pub const PARTIAL_REASON: &str = "partial";

/// Why shard traces could not be merged.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// A trace could not be read or the output written.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// The traces are not the shards of one run.
    #[error("{path}: {source}")]
    Shards {
        /// The trace the check tripped on.
        path: PathBuf,
        /// What is wrong.
        source: ShardError,
    },
    /// The run has another number of shards than expected.
    #[error("the shards say the run has {found} shards, not the {expected} expected")]
    Count {
        /// `--expect-shards`.
        expected: u32,
        /// What the shards say.
        found: u32,
    },
    /// Two shards wrote the same request id (the split would never do that).
    #[error("{path}: request {id} is also in another shard")]
    DuplicateId {
        /// The second trace holding it.
        path: PathBuf,
        /// The id.
        id: u64,
    },
    /// No trace given.
    #[error("no shard trace given")]
    Empty,
}

/// What a merge wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeStats {
    /// Requests written.
    pub requests: u64,
    /// Of them, requests only checkpoints describe (outcome `interrupted`).
    pub interrupted: u64,
    /// Blocks of the inputs that could not be decoded (their requests are lost).
    pub blocks_lost: u64,
    /// The shards and what is missing.
    pub shards: MergedShards,
}

/// Merges the shard traces `inputs` into `output` (which must not exist: the caller decides
/// about overwriting). `expect_shards` checks the run's shard count.
pub fn merge_traces(
    inputs: &[PathBuf],
    output: &Path,
    expect_shards: Option<u32>,
) -> Result<MergeStats, MergeError> {
    if inputs.is_empty() {
        return Err(MergeError::Empty);
    }
    let readers: Vec<TraceReader> = inputs
        .iter()
        .map(|p| TraceReader::open(p))
        .collect::<Result<_, _>>()?;
    let interrupted: Vec<usize> = readers.iter().map(|r| r.interrupted().len()).collect();
    let traces: Vec<ShardTrace<'_>> = readers
        .iter()
        .zip(&interrupted)
        .map(|(r, &n)| ShardTrace {
            header: r.header(),
            manifest: r.manifest(),
            run_end: r.run_end(),
            interrupted: n,
        })
        .collect();
    let set = ShardSet::of(&traces).map_err(|source| {
        let at = match &source {
            ShardError::NotAShard(i) | ShardError::OtherRun { other: i, .. } => *i,
            _ => 0,
        };
        MergeError::Shards {
            path: inputs.get(at).cloned().unwrap_or_default(),
            source,
        }
    })?;
    if let Some(expected) = expect_shards.filter(|&n| n != set.merged.count) {
        return Err(MergeError::Count {
            expected,
            found: set.merged.count,
        });
    }
    let base = &readers[set.base];
    let mut header = base.header().clone();
    header.shard = 0;
    let mut manifest = base.manifest().clone();
    manifest.shard = None;
    manifest.shards = Some(set.merged.clone());
    let writer = TraceWriter::create(output, header, &manifest, WriterConfig::default())?;
    let sender = writer.sender();
    let mut stats = MergeStats {
        requests: 0,
        interrupted: 0,
        blocks_lost: 0,
        shards: set.merged.clone(),
    };
    let mut ids = HashSet::new();
    let mut end_ns = 0u64;
    let mut order: Vec<usize> = (0..readers.len()).collect();
    order.sort_by_key(|&i| readers[i].manifest().shard.as_ref().map_or(0, |s| s.index));
    for i in order {
        let offset = set.offsets_ns[i];
        if let Some(end) = readers[i].run_end() {
            end_ns = end_ns.max(shift(end.end_ns, offset));
        }
        for record in readers[i].requests() {
            let Ok(mut record) = record else {
                stats.blocks_lost += 1;
                continue;
            };
            if !ids.insert(record.meta.id) {
                return Err(MergeError::DuplicateId {
                    path: inputs[i].clone(),
                    id: record.meta.id,
                });
            }
            place(&mut record, offset);
            end_ns = end_ns.max(record.meta.end_ns);
            if record.meta.outcome == crate::Outcome::Interrupted {
                stats.interrupted += 1;
            }
            stats.requests += 1;
            sender.send(record)?;
        }
    }
    drop(sender);
    let reason = if set.merged.is_partial() {
        format!("{PARTIAL_REASON}: {}", set.merged.describe())
    } else {
        MERGED_REASON.to_string()
    };
    writer.finish(RunEnd {
        end_realtime_ns: base.header().anchor.to_realtime_ns(end_ns),
        end_ns,
        reason,
        ..RunEnd::default()
    })?;
    Ok(stats)
}

/// Moves every time of a record by `offset` ns (onto the base shard's clock).
fn place(record: &mut RequestRecord, offset: i64) {
    let m = &mut record.meta;
    m.intended_ns = shift(m.intended_ns, offset);
    m.send_ns = shift(m.send_ns, offset);
    m.headers_ns = m.headers_ns.map(|t| shift(t, offset));
    m.end_ns = shift(m.end_ns, offset);
    for c in &mut record.chunks {
        c.arrival_ns = shift(c.arrival_ns, offset);
    }
}
