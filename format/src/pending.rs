//! What the writer holds for its next block: final records, and the latest checkpoint of each
//! request still streaming.
//!
//! A checkpoint is held back from a block while it is young (under [`hold`] of the block age): a
//! block written because it filled up, or because something else in it aged, leaves it for a
//! later one. Why: a request's final
//! record carries all of its chunks again, so a checkpoint written shortly before its final record
//! doubles the writer's encoding and compression of those chunks for nothing. A checkpoint still
//! held when the final record arrives is dropped unwritten. At 1,024 streams × 10 ms, where a
//! block fills in under a second, checkpoints made the trace 64% larger than a run without them;
//! held back, 38% (docs/PERFORMANCE.md, *The lag probe's ticker, checkpoints held back, bodies
//! built once*). The crash bound stays: a checkpoint is written at most one block age after it
//! arrived.
//!
//! Consecutive checkpoints of one request are held as parts, each with its own age, so that a
//! block takes only the parts old enough and the newest waits on its own: merged into the older
//! one, it would go out with it, and a request that ends soon after would have had those chunks
//! encoded twice (docs/PERFORMANCE.md, *Each held checkpoint waits its own time*). The parts a
//! block takes are written as one checkpoint.

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

/// A held checkpoint part, when it arrived, and its bytes already counted by the block that
/// left it for a later one (0 until then).
struct Held {
    checkpoint: HeldCheckpoint,
    since: Instant,
    carried: usize,
}

/// What one block takes out of [`Pending`].
pub(crate) struct Block {
    pub(crate) records: Vec<PackedRecord>,
    pub(crate) checkpoints: Vec<HeldCheckpoint>,
}

/// Most parts held for one request. A request checkpointing faster than its parts age (a
/// checkpoint interval set far under half the block age) has its newest checkpoints merged
/// into its last part, as all of them once were.
const MAX_PARTS: usize = 4;

/// Final records and held checkpoints (per request, its parts in order, oldest first).
#[derive(Default)]
pub(crate) struct Pending {
    records: Vec<PackedRecord>,
    checkpoints: Vec<Option<Vec<Held>>>,
    slot_of: HashMap<u64, usize>,
    /// Estimated payload bytes of everything held.
    pub(crate) bytes: usize,
    /// Of those, the bytes of checkpoint parts a block left for a later one.
    carried: usize,
    /// When the oldest record or checkpoint held arrived.
    pub(crate) oldest: Option<Instant>,
}

impl Pending {
    pub(crate) fn is_empty(&self) -> bool {
        self.records.is_empty() && self.checkpoints.is_empty()
    }

    /// Estimated payload bytes of what arrived since the last block: what fills the next one.
    /// Parts held over from a block do not count, so holding them never makes the next block
    /// flush at once.
    pub(crate) fn new_bytes(&self) -> usize {
        self.bytes.saturating_sub(self.carried)
    }

    fn note_arrival(&mut self, size: usize, at: Instant) {
        self.oldest = Some(self.oldest.map_or(at, |o| o.min(at)));
        self.bytes += size;
    }

    pub(crate) fn add_record(&mut self, record: PackedRecord, now: Instant) {
        // The final record supersedes the request's checkpoints still held here.
        if let Some(slot) = self.slot_of.remove(&record.meta.id) {
            for part in self.checkpoints[slot].take().into_iter().flatten() {
                self.bytes = self
                    .bytes
                    .saturating_sub(estimate_bytes(&part.checkpoint.record));
                self.carried = self.carried.saturating_sub(part.carried);
            }
        }
        self.note_arrival(estimate_bytes(&record), now);
        self.records.push(record);
    }

    pub(crate) fn add_checkpoint(&mut self, checkpoint: HeldCheckpoint, now: Instant) {
        let id = checkpoint.record.meta.id;
        let size = estimate_bytes(&checkpoint.record);
        let parts = self
            .slot_of
            .get(&id)
            .and_then(|&slot| self.checkpoints[slot].as_mut());
        match parts {
            Some(parts) if parts.len() >= MAX_PARTS => {
                if let Some(last) = parts.last_mut() {
                    let before = estimate_bytes(&last.checkpoint.record);
                    extend(&mut last.checkpoint, checkpoint);
                    let after = estimate_bytes(&last.checkpoint.record);
                    self.bytes = self.bytes.saturating_sub(before) + after;
                }
            }
            Some(parts) => {
                parts.push(Held {
                    checkpoint,
                    since: now,
                    carried: 0,
                });
                self.note_arrival(size, now);
            }
            None => {
                self.slot_of.insert(id, self.checkpoints.len());
                self.checkpoints.push(Some(vec![Held {
                    checkpoint,
                    since: now,
                    carried: 0,
                }]));
                self.note_arrival(size, now);
            }
        }
    }

    /// Takes what the next block holds: every final record, and the checkpoint parts that
    /// arrived at or before `keep_after` (all of them when None, or when those kept would come
    /// to `max_kept_bytes` or more), a request's parts taken together as one checkpoint. The
    /// rest stay for a later block.
    pub(crate) fn take_block(
        &mut self,
        keep_after: Option<Instant>,
        max_kept_bytes: usize,
    ) -> Block {
        let held: Vec<Vec<Held>> = self.checkpoints.drain(..).flatten().collect();
        let young = |h: &Held| keep_after.is_some_and(|cut| h.since > cut);
        let kept_bytes: usize = held
            .iter()
            .flatten()
            .filter(|h| young(h))
            .map(|h| estimate_bytes(&h.checkpoint.record))
            .sum();
        let keep_any = kept_bytes < max_kept_bytes;
        let mut block = Block {
            records: std::mem::take(&mut self.records),
            checkpoints: Vec::new(),
        };
        self.slot_of.clear();
        self.bytes = 0;
        self.carried = 0;
        self.oldest = None;
        for parts in held {
            // Parts are in order of arrival: the old enough ones come first.
            let (mut kept, written): (Vec<Held>, Vec<Held>) =
                parts.into_iter().partition(|h| keep_any && young(h));
            let mut written = written.into_iter().map(|h| h.checkpoint);
            if let Some(mut first) = written.next() {
                written.for_each(|newer| extend(&mut first, newer));
                block.checkpoints.push(first);
            }
            if let Some(id) = kept.first().map(|h| h.checkpoint.record.meta.id) {
                for h in &mut kept {
                    h.carried = estimate_bytes(&h.checkpoint.record);
                    self.carried += h.carried;
                    self.note_arrival(h.carried, h.since);
                }
                self.slot_of.insert(id, self.checkpoints.len());
                self.checkpoints.push(Some(kept));
            }
        }
        block
    }
}

/// Extends a held checkpoint with the request's next one: its chunks continue the held ones,
/// its head is the newer one's, and the offset stays the held one's.
fn extend(held: &mut HeldCheckpoint, newer: HeldCheckpoint) {
    let mut newer = newer.record;
    let mut chunks = std::mem::take(&mut held.record.chunks);
    chunks.append(&mut newer.chunks);
    newer.chunks = chunks;
    held.record = newer;
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

    /// The estimated bytes of everything held, counted afresh.
    fn held_bytes(p: &Pending) -> usize {
        let records: usize = p.records.iter().map(estimate_bytes).sum();
        let parts: usize = p
            .checkpoints
            .iter()
            .flatten()
            .flatten()
            .map(|h| estimate_bytes(&h.checkpoint.record))
            .sum();
        records + parts
    }

    #[test]
    fn a_newer_checkpoint_waits_on_its_own_age() {
        let t0 = Instant::now();
        let mut p = Pending::default();
        let first = checkpoint(1, 10, 0);
        let first_len = first.record.chunks.len();
        p.add_checkpoint(first, t0);
        p.add_checkpoint(
            checkpoint(1, 5, first_len as u64),
            t0 + Duration::from_millis(600),
        );
        assert_eq!(p.oldest, Some(t0));
        assert_eq!(p.bytes, held_bytes(&p));
        // Cut between the two: the older part goes alone, the newer one stays with its age.
        let block = p.take_block(Some(t0 + Duration::from_millis(100)), usize::MAX);
        assert_eq!(block.checkpoints.len(), 1);
        let c = &block.checkpoints[0];
        assert_eq!((c.chunk_offset, c.record.chunks.len()), (0, first_len));
        assert_eq!(p.oldest, Some(t0 + Duration::from_millis(600)));
        assert_eq!(p.bytes, estimate_bytes(&record(1, 5)));
        // The final record comes before it is old: it is never written.
        p.add_record(record(1, 30), t0 + Duration::from_millis(700));
        let block = p.take_block(Some(t0 + Duration::from_millis(650)), usize::MAX);
        assert_eq!(ids(&block), (vec![1], vec![]));
        assert!(p.is_empty());
    }

    #[test]
    fn the_parts_a_block_takes_are_one_checkpoint() {
        let t0 = Instant::now();
        let mut p = Pending::default();
        let first_len = record(1, 10).chunks.len();
        let second_len = record(1, 5).chunks.len();
        p.add_checkpoint(checkpoint(1, 10, 0), t0);
        let mut newer = checkpoint(1, 5, first_len as u64);
        newer.record.meta.end_ns = 42;
        p.add_checkpoint(newer, t0 + Duration::from_millis(600));
        p.add_checkpoint(
            checkpoint(1, 3, (first_len + second_len) as u64),
            t0 + Duration::from_millis(1200),
        );
        let block = p.take_block(Some(t0 + Duration::from_millis(700)), usize::MAX);
        assert_eq!(block.checkpoints.len(), 1);
        let c = &block.checkpoints[0];
        assert_eq!(c.chunk_offset, 0, "the first part's offset");
        assert_eq!(c.record.chunks.len(), first_len + second_len);
        assert_eq!(c.record.meta.end_ns, 42, "the head of the last part taken");
        // The youngest part stays, at its own offset.
        let block = p.take_block(None, usize::MAX);
        assert_eq!(block.checkpoints.len(), 1);
        let c = &block.checkpoints[0];
        assert_eq!(c.chunk_offset, (first_len + second_len) as u64);
        assert_eq!(c.record.chunks.len(), record(1, 3).chunks.len());
    }

    #[test]
    fn parts_held_over_do_not_count_toward_the_next_block() {
        let t0 = Instant::now();
        let mut p = Pending::default();
        p.add_checkpoint(checkpoint(1, 40, 0), t0);
        p.add_checkpoint(checkpoint(2, 40, 0), t0);
        p.take_block(Some(t0 - Duration::from_millis(1)), usize::MAX);
        assert_eq!(p.new_bytes(), 0, "only carried parts held");
        assert_eq!(p.bytes, held_bytes(&p));
        // What arrives after the block counts, a part of a carried request too.
        p.add_record(record(3, 10), t0 + Duration::from_millis(10));
        let second = checkpoint(2, 5, record(2, 40).chunks.len() as u64);
        p.add_checkpoint(second, t0 + Duration::from_millis(20));
        let new = estimate_bytes(&record(3, 10)) + estimate_bytes(&record(2, 5));
        assert_eq!(p.new_bytes(), new);
        // A final record drops its carried part from both counts.
        p.add_record(record(1, 60), t0 + Duration::from_millis(30));
        assert_eq!(p.bytes, held_bytes(&p));
        assert_eq!(p.new_bytes(), new + estimate_bytes(&record(1, 60)));
        // A block that takes everything leaves nothing carried.
        p.take_block(None, usize::MAX);
        assert_eq!((p.bytes, p.new_bytes()), (0, 0));
    }

    #[test]
    fn past_the_most_parts_the_newest_merge_into_the_last() {
        let t0 = Instant::now();
        let mut p = Pending::default();
        let mut offset = 0;
        let mut total = 0;
        for i in 0..MAX_PARTS + 3 {
            let c = checkpoint(1, 4 + i, offset);
            offset += c.record.chunks.len() as u64;
            total += c.record.chunks.len();
            p.add_checkpoint(c, t0 + Duration::from_millis(10 * i as u64));
            assert_eq!(p.bytes, held_bytes(&p), "after checkpoint {i}");
        }
        let parts = p.checkpoints[0].as_ref().unwrap();
        assert_eq!(parts.len(), MAX_PARTS);
        let held: usize = parts.iter().map(|h| h.checkpoint.record.chunks.len()).sum();
        assert_eq!(held, total, "no chunk lost or doubled");
        let block = p.take_block(None, usize::MAX);
        assert_eq!(block.checkpoints.len(), 1);
        assert_eq!(block.checkpoints[0].record.chunks.len(), total);
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
