//! Requests a killed recorder left unfinished: their checkpoints chained into one record each.
//!
//! A request still streaming is checkpointed about every half second (docs/FORMAT.md, section
//! 4.6); each checkpoint holds the request's head as of then and the chunks since the previous
//! one. A final record supersedes every checkpoint of its request, and a writer sends it after
//! them, so walking the blocks in file order and forgetting a request at its final record
//! leaves exactly the requests that never got one. Memory is bounded by the requests in flight
//! at any moment, not by the length of the run.

use crate::block::DecodedBlock;
use crate::types::{Outcome, RequestRecord};
use std::collections::HashMap;

/// Whether a reader must chain the checkpoints of a trace with this run end: always without
/// one (a killed writer), and when the writer said some request was left unfinished.
pub fn needs_merge(run_end: Option<&crate::types::RunEnd>) -> bool {
    run_end.is_none_or(|end| end.client_health.checkpointed_without_final > Some(0))
}

/// One request as its checkpoints describe it so far.
struct Partial {
    record: RequestRecord,
    /// Chunks were lost between two checkpoints (a damaged block): later chunks are not
    /// appended, so the request keeps a gap-free prefix.
    gap_after: Option<usize>,
}

/// Chains checkpoints across the blocks of one trace, in file order.
#[derive(Default)]
pub struct Interrupted {
    open: HashMap<u64, Partial>,
    /// The order requests were first checkpointed in, for a stable result.
    first_seen: Vec<u64>,
}

impl Interrupted {
    /// Takes in one decoded block (the next in file order).
    pub fn add_block(&mut self, block: &DecodedBlock) {
        if let Some(section) = &block.checkpoints {
            for (i, &offset) in section.chunk_offset.iter().enumerate() {
                if i < section.block.requests.len() {
                    self.add_checkpoint(section.block.record(i), offset);
                }
            }
        }
        if self.open.is_empty() {
            return;
        }
        for request in &block.requests {
            self.open.remove(&request.meta.id);
        }
    }

    fn add_checkpoint(&mut self, mut record: RequestRecord, offset: u64) {
        record.meta.outcome = Outcome::Interrupted;
        let Some(partial) = self.open.get_mut(&record.meta.id) else {
            self.first_seen.push(record.meta.id);
            let gap_after = (offset > 0).then_some(0);
            if offset > 0 {
                record.chunks.clear();
            }
            self.open
                .insert(record.meta.id, Partial { record, gap_after });
            return;
        };
        let mut chunks = std::mem::take(&mut partial.record.chunks);
        let have = chunks.len() as u64;
        if partial.gap_after.is_none() {
            if offset > have {
                partial.gap_after = Some(chunks.len());
            } else {
                // An overlap (the same chunks twice) keeps the first copy.
                let skip = (have - offset) as usize;
                chunks.extend(record.chunks.drain(..).skip(skip));
            }
        }
        record.chunks = chunks;
        partial.record = record;
    }

    /// The requests that never got a final record, in the order they were first checkpointed,
    /// each as [`Outcome::Interrupted`] with its error text saying how much is known.
    pub fn finish(mut self) -> Vec<RequestRecord> {
        let mut out = Vec::with_capacity(self.open.len());
        for id in self.first_seen {
            let Some(partial) = self.open.remove(&id) else {
                continue;
            };
            let mut record = partial.record;
            let note = match partial.gap_after {
                None => format!(
                    "interrupted: still streaming when the recorder stopped; {} chunks up to \
                     its last checkpoint",
                    record.chunks.len()
                ),
                Some(n) => format!(
                    "interrupted: still streaming when the recorder stopped; the first {n} \
                     chunks only (a later part was in a damaged block)"
                ),
            };
            record.meta.error = Some(note);
            out.push(record);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::CheckpointSection;
    use crate::codec;
    use crate::packed::PackedRecord;
    use crate::types::Checkpoint;

    fn block(finals: &[RequestRecord], checkpoints: &[Checkpoint]) -> DecodedBlock {
        let finals: Vec<PackedRecord> = finals.iter().cloned().map(PackedRecord::from).collect();
        let held: Vec<(PackedRecord, u64)> = checkpoints
            .iter()
            .map(|c| (c.record.clone().into(), c.chunk_offset))
            .collect();
        let refs: Vec<(&PackedRecord, u64)> = held.iter().map(|(r, o)| (r, *o)).collect();
        let raw = codec::encode_block(&finals, &refs).unwrap();
        let mut out = DecodedBlock::default();
        codec::decode_block_into(&raw, &mut out).unwrap();
        out
    }

    fn split(record: &RequestRecord, at: &[usize]) -> Vec<Checkpoint> {
        let mut bounds = vec![0];
        bounds.extend_from_slice(at);
        bounds.push(record.chunks.len());
        bounds
            .windows(2)
            .map(|w| {
                let mut r = record.clone();
                r.meta.outcome = Outcome::Interrupted;
                r.chunks = record.chunks[w[0]..w[1]].to_vec();
                Checkpoint {
                    record: r,
                    chunk_offset: w[0] as u64,
                }
            })
            .collect()
    }

    #[test]
    fn checkpoints_without_a_final_chain_into_one_interrupted_request() {
        let records = crate::synthetic::requests(3, 9, 5, true);
        let parts = split(&records[0], &[3, 6]);
        let mut merge = Interrupted::default();
        merge.add_block(&block(&[], &parts[..1]));
        merge.add_block(&block(&records[1..2], &parts[1..]));
        let out = merge.finish();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].meta.outcome, Outcome::Interrupted);
        assert_eq!(out[0].chunks, records[0].chunks);
        assert!(out[0].meta.error.as_deref().unwrap().contains("9 chunks"));
    }

    #[test]
    fn a_final_record_supersedes_its_checkpoints() {
        let records = crate::synthetic::requests(2, 4, 5, false);
        let parts = split(&records[0], &[2]);
        let mut merge = Interrupted::default();
        merge.add_block(&block(&[], &parts[..1]));
        merge.add_block(&block(&records[..1], &parts[1..]));
        assert!(merge.finish().is_empty());
    }

    #[test]
    fn a_lost_checkpoint_keeps_the_gap_free_prefix() {
        let records = crate::synthetic::requests(1, 9, 5, false);
        let parts = split(&records[0], &[3, 6]);
        let mut merge = Interrupted::default();
        merge.add_block(&block(&[], &parts[..1]));
        merge.add_block(&block(&[], &parts[2..]));
        let out = merge.finish();
        assert_eq!(out[0].chunks, records[0].chunks[..3]);
        assert!(out[0]
            .meta
            .error
            .as_deref()
            .unwrap()
            .contains("first 3 chunks"));
    }

    #[test]
    fn the_section_survives_a_round_trip() {
        let records = crate::synthetic::requests(2, 4, 5, true);
        let parts = split(&records[1], &[1]);
        let decoded = block(&records[..1], &parts);
        assert_eq!(decoded.records(), records[..1]);
        let section: &CheckpointSection = decoded.checkpoints.as_deref().unwrap();
        assert_eq!(section.chunk_offset, vec![0, 1]);
        assert_eq!(section.block.record(1).chunks, records[1].chunks[1..]);
        assert_eq!(section.block.record(1).meta.outcome, Outcome::Interrupted);
    }
}
