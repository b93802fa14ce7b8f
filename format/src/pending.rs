//! What the writer holds for its next block: final records, and the latest checkpoint of each
//! request still streaming.
//!
//! A checkpoint is held back from a block while it is young (under [`hold`] of the block age): a
//! block written because it filled up, or because something else in it aged, leaves it for a
//! later one. Why: a request's final
//! record carries all of its chunks again, so a checkpoint written shortly before its final record
//! doubles the writer's encoding and compression of those chunks for nothing. A checkpoint still
//! held when the final record arrives is dropped unwritten, and consecutive checkpoints of one
//! request merge while held. At 1,024 streams × 10 ms, where a block fills in under a second,
//! checkpoints made the trace 64% larger than a run without them; held back, 38%
//! (docs/performance/2026-12-02-to-03.md, *The lag probe's ticker, checkpoints held back, bodies
//! built once*). The crash bound stays: a checkpoint is written at most one block age after it
//! arrived.

use crate::packed::PackedRecord;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A checkpoint as the writer holds it: the request as of then, with the chunks since its
/// previous checkpoint, and the index of the first of them in the request's whole list.
pub(crate) struct HeldCheckpoint {
    pub(crate) record: PackedRecord,
    pub(crate) chunk_offset: u64,
}

/// How long a checkpoint is held back from a block that is written because it is full or
/// because something else in it is old: half the block age. The age flush then writes every
/// checkpoint older than that together, so blocks come at most twice per block age on that
/// account; and a checkpoint waits at most the block age, as every record does.
pub(crate) fn hold(block_max_age: Duration) -> Duration {
    block_max_age / 2
}

/// Rough uncompressed size of a record in a block payload, for the flush decision.
pub(crate) fn estimate_bytes(record: &PackedRecord) -> usize {
    let strings = record.meta.error.as_ref().map_or(0, String::len)
        + record.meta.finish_reason.as_ref().map_or(0, String::len)
        + record
            .meta
            .response_headers
            .iter()
            .map(|(k, v)| k.len() + v.len() + 2)
            .sum::<usize>();
    let text = record.chunks.text_bytes();
    64 + strings + 12 * record.chunks.len() + text
}

/// A held checkpoint and when its oldest part arrived.
struct Held {
    checkpoint: HeldCheckpoint,
    since: Instant,
}

/// What one block takes out of [`Pending`].
pub(crate) struct Block {
    pub(crate) records: Vec<PackedRecord>,
    pub(crate) checkpoints: Vec<HeldCheckpoint>,
}

/// Final records and held checkpoints (one per request: consecutive ones merge).
#[derive(Default)]
pub(crate) struct Pending {
    records: Vec<PackedRecord>,
    checkpoints: Vec<Option<Held>>,
    slot_of: HashMap<u64, usize>,
    /// Estimated payload bytes of everything held.
    pub(crate) bytes: usize,
    /// When the oldest record or checkpoint held arrived.
    pub(crate) oldest: Option<Instant>,
}

impl Pending {
    pub(crate) fn is_empty(&self) -> bool {
        self.records.is_empty() && self.checkpoints.is_empty()
    }

    fn note_arrival(&mut self, size: usize, at: Instant) {
        self.oldest = Some(self.oldest.map_or(at, |o| o.min(at)));
        self.bytes += size;
    }

    pub(crate) fn add_record(&mut self, record: PackedRecord, now: Instant) {
        // The final record supersedes the request's checkpoint still held here.
        if let Some(slot) = self.slot_of.remove(&record.meta.id) {
            if let Some(held) = self.checkpoints[slot].take() {
                self.bytes = self
                    .bytes
                    .saturating_sub(estimate_bytes(&held.checkpoint.record));
            }
        }
        self.note_arrival(estimate_bytes(&record), now);
        self.records.push(record);
    }

    pub(crate) fn add_checkpoint(&mut self, checkpoint: HeldCheckpoint, now: Instant) {
        let id = checkpoint.record.meta.id;
        if let Some(held) = self
            .slot_of
            .get(&id)
            .and_then(|&slot| self.checkpoints[slot].as_mut())
        {
            // Chunks continue the held ones; the head is the newer one's; the age is the
            // older one's. The bytes counted are the merged record's.
            let before = estimate_bytes(&held.checkpoint.record);
            let mut newer = checkpoint.record;
            let mut chunks = std::mem::take(&mut held.checkpoint.record.chunks);
            chunks.append(&mut newer.chunks);
            newer.chunks = chunks;
            held.checkpoint.record = newer;
            let after = estimate_bytes(&held.checkpoint.record);
            self.bytes = self.bytes.saturating_sub(before) + after;
            return;
        }
        self.note_arrival(estimate_bytes(&checkpoint.record), now);
        self.slot_of.insert(id, self.checkpoints.len());
        self.checkpoints.push(Some(Held {
            checkpoint,
            since: now,
        }));
    }

    /// Takes what the next block holds: every final record, and the checkpoints that arrived
    /// at or before `keep_after` (all of them when None, or when those kept would come to
    /// `max_kept_bytes` or more). The rest stay for a later block.
    pub(crate) fn take_block(
        &mut self,
        keep_after: Option<Instant>,
        max_kept_bytes: usize,
    ) -> Block {
        let held: Vec<Held> = self.checkpoints.drain(..).flatten().collect();
        let young = |h: &Held| keep_after.is_some_and(|cut| h.since > cut);
        let kept_bytes: usize = held
            .iter()
            .filter(|h| young(h))
            .map(|h| estimate_bytes(&h.checkpoint.record))
            .sum();
        let keep_any = kept_bytes < max_kept_bytes;
        let (kept, written): (Vec<Held>, Vec<Held>) =
            held.into_iter().partition(|h| keep_any && young(h));
        let block = Block {
            records: std::mem::take(&mut self.records),
            checkpoints: written.into_iter().map(|h| h.checkpoint).collect(),
        };
        self.slot_of.clear();
        self.bytes = 0;
        self.oldest = None;
        for h in kept {
            self.note_arrival(estimate_bytes(&h.checkpoint.record), h.since);
            self.slot_of
                .insert(h.checkpoint.record.meta.id, self.checkpoints.len());
            self.checkpoints.push(Some(h));
        }
        block
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic;

    fn record(id: u64, chunks: usize) -> PackedRecord {
        let mut rng = synthetic::SplitMix::new(id);
        let mut r = synthetic::request(&mut rng, id, 1_000_000_000, chunks, false);
        r.meta.id = id;
        r.into()
    }

    fn checkpoint(id: u64, chunks: usize, chunk_offset: u64) -> HeldCheckpoint {
        HeldCheckpoint {
            record: record(id, chunks),
            chunk_offset,
        }
    }

    fn ids(block: &Block) -> (Vec<u64>, Vec<u64>) {
        (
            block.records.iter().map(|r| r.meta.id).collect(),
            block.checkpoints.iter().map(|c| c.record.meta.id).collect(),
        )
    }

    #[test]
    fn a_young_checkpoint_waits_for_the_next_block_and_an_old_one_goes() {
        let t0 = Instant::now();
        let mut p = Pending::default();
        p.add_checkpoint(checkpoint(1, 10, 0), t0);
        p.add_record(record(2, 10), t0 + Duration::from_millis(100));
        p.add_checkpoint(checkpoint(3, 10, 0), t0 + Duration::from_millis(400));
        // Cut at 300 ms: checkpoint 1 (0 ms) goes, checkpoint 3 (400 ms) stays.
        let block = p.take_block(Some(t0 + Duration::from_millis(300)), usize::MAX);
        assert_eq!(ids(&block), (vec![2], vec![1]));
        assert!(!p.is_empty());
        assert_eq!(p.oldest, Some(t0 + Duration::from_millis(400)));
        assert_eq!(p.bytes, estimate_bytes(&record(3, 10)));
        // The next block takes it once it is old enough.
        let block = p.take_block(Some(t0 + Duration::from_millis(500)), usize::MAX);
        assert_eq!(ids(&block), (vec![], vec![3]));
        assert!(p.is_empty());
        assert_eq!((p.bytes, p.oldest), (0, None));
    }

    #[test]
    fn a_final_record_replaces_its_held_checkpoint_even_after_a_block() {
        let t0 = Instant::now();
        let mut p = Pending::default();
        p.add_checkpoint(checkpoint(1, 10, 0), t0);
        let block = p.take_block(Some(t0 - Duration::from_millis(1)), usize::MAX);
        assert_eq!(ids(&block), (vec![], vec![]));
        p.add_record(record(1, 20), t0 + Duration::from_millis(10));
        let block = p.take_block(None, usize::MAX);
        assert_eq!(ids(&block), (vec![1], vec![]), "no checkpoint once final");
        assert!(p.is_empty());
    }

    #[test]
    fn checkpoints_of_one_request_merge_and_keep_the_first_ones_age() {
        let t0 = Instant::now();
        let mut p = Pending::default();
        p.add_checkpoint(checkpoint(1, 10, 0), t0);
        let first_len = p.checkpoints[0]
            .as_ref()
            .unwrap()
            .checkpoint
            .record
            .chunks
            .len();
        // Carried over to the next block, then extended there.
        p.take_block(Some(t0 - Duration::from_millis(1)), usize::MAX);
        p.add_checkpoint(
            checkpoint(1, 5, first_len as u64),
            t0 + Duration::from_millis(600),
        );
        assert_eq!(p.oldest, Some(t0));
        let merged = &p.checkpoints[0].as_ref().unwrap().checkpoint.record;
        assert_eq!(p.bytes, estimate_bytes(merged), "counted once, as merged");
        let block = p.take_block(Some(t0), usize::MAX);
        assert_eq!(block.checkpoints.len(), 1);
        let c = &block.checkpoints[0];
        assert_eq!(c.chunk_offset, 0, "the held one's offset");
        assert_eq!(c.record.chunks.len(), first_len + record(1, 5).chunks.len());
    }

    #[test]
    fn young_checkpoints_that_would_fill_half_a_block_are_written_anyway() {
        let t0 = Instant::now();
        let mut p = Pending::default();
        p.add_checkpoint(checkpoint(1, 50, 0), t0);
        p.add_checkpoint(checkpoint(2, 50, 0), t0);
        let young = p.bytes;
        let block = p.take_block(Some(t0 - Duration::from_millis(1)), young);
        assert_eq!(ids(&block), (vec![], vec![1, 2]));
        assert!(p.is_empty());
        // Under the bound they stay.
        p.add_checkpoint(checkpoint(1, 50, 0), t0);
        let block = p.take_block(Some(t0 - Duration::from_millis(1)), young);
        assert_eq!(ids(&block), (vec![], vec![]));
        assert!(!p.is_empty());
    }

    #[test]
    fn without_a_cut_everything_goes() {
        let t0 = Instant::now();
        let mut p = Pending::default();
        p.add_checkpoint(checkpoint(1, 10, 0), t0);
        p.add_record(record(2, 10), t0);
        let block = p.take_block(None, usize::MAX);
        assert_eq!(ids(&block), (vec![2], vec![1]));
        assert!(p.is_empty());
    }
}
