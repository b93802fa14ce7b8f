//! Loads traces into per-request facts, one decoded block at a time.

use crate::facts::{self, ChunkSlice, FactsOptions, RequestFacts};
use std::path::{Path, PathBuf};
use tokentrace_format::{DecodedBlock, FormatError, Header, Manifest, RunEnd, TraceReader};

/// Errors while loading traces.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The trace could not be opened at all.
    #[error("{path}: {source}")]
    Open {
        /// The trace.
        path: PathBuf,
        /// Why.
        #[source]
        source: FormatError,
    },
}

/// What one decoding worker produced: its requests, chunks read, and (block, error) pairs.
type WorkerPart = (Dataset, u64, Vec<(usize, String)>);

/// What is known about one trace beyond its requests.
#[derive(Debug, Clone)]
pub struct TraceInfo {
    /// The file it was read from.
    pub path: PathBuf,
    /// A short name for reports (the file name).
    pub label: String,
    /// The file header.
    pub header: Header,
    /// The run manifest.
    pub manifest: Manifest,
    /// The run end, when the writer finished.
    pub run_end: Option<RunEnd>,
    /// The reader's integrity verdict (`ok`, `recovered`, `corrupt`).
    pub integrity: String,
    /// Problems met while reading (skipped or undecodable blocks).
    pub warnings: Vec<String>,
    /// Chunks read.
    pub chunks: u64,
}

/// The facts of every request of one or more traces.
#[derive(Debug, Clone, Default)]
pub struct Dataset {
    /// The traces, in the order given.
    pub traces: Vec<TraceInfo>,
    /// Every request, ordered by (trace, id).
    pub requests: Vec<RequestFacts>,
    /// Pooled gaps in ns, indexed by `RequestFacts::gap_start` (empty unless kept).
    pub gaps: Vec<u64>,
}

impl Dataset {
    /// Reads every trace in `paths`.
    pub fn load(paths: &[PathBuf], options: FactsOptions) -> Result<Dataset, LoadError> {
        let mut dataset = Dataset::default();
        for path in paths {
            dataset.add_trace(path, options)?;
        }
        crate::run_shards::align(&mut dataset);
        dataset.finish();
        Ok(dataset)
    }

    /// Reads one trace and appends its requests (call [`Dataset::finish`] after the last).
    pub fn add_trace(&mut self, path: &Path, options: FactsOptions) -> Result<(), LoadError> {
        let reader = TraceReader::open(path).map_err(|source| LoadError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        let trace = self.traces.len() as u32;
        let first_request = self.requests.len();
        let mut warnings: Vec<String> = reader
            .integrity()
            .skipped()
            .iter()
            .map(skipped_warning)
            .collect();
        // The index knows how many requests and chunks follow: reserve once instead of
        // growing (and copying) hundreds of megabytes of facts.
        let (expected_requests, expected_chunks) = (0..reader.block_count())
            .filter_map(|i| reader.block_info(i)?.counts)
            .fold((0usize, 0usize), |(r, c), (br, bc)| {
                (r + br as usize, c + bc as usize)
            });
        self.requests.reserve(expected_requests);
        if options.keep_gaps {
            self.gaps.reserve(expected_chunks);
        }
        let workers = options.threads.clamp(1, reader.block_count().max(1));
        let mut chunks = 0u64;
        if workers == 1 {
            // One block's buffers, reused: decoding into warm memory is about twice as fast
            // as allocating fresh columns per block.
            let mut block = DecodedBlock::default();
            for index in 0..reader.block_count() {
                match reader.decode_block_into(index, &mut block) {
                    Ok(()) => {
                        chunks += block.chunks.len() as u64;
                        self.add_block(trace, &block, options);
                    }
                    // A block that passed its checksum but does not decode is reported and
                    // skipped; its neighbours still count.
                    Err(err) => warnings.push(err.to_string()),
                }
            }
        } else {
            // Blocks decode independently: worker k takes blocks k, k + n, …; the parts are
            // merged and ordered by `finish`.
            let parts: Vec<WorkerPart> = std::thread::scope(|scope| {
                let handles: Vec<_> = (0..workers)
                    .map(|k| {
                        let reader = &reader;
                        scope.spawn(move || {
                            let (mut part, mut n, mut errors) =
                                (Dataset::default(), 0u64, Vec::new());
                            let mut block = DecodedBlock::default();
                            for index in (k..reader.block_count()).step_by(workers) {
                                match reader.decode_block_into(index, &mut block) {
                                    Ok(()) => {
                                        n += block.chunks.len() as u64;
                                        part.add_block(trace, &block, options);
                                    }
                                    Err(err) => errors.push((index, err.to_string())),
                                }
                            }
                            (part, n, errors)
                        })
                    })
                    .collect();
                handles.into_iter().filter_map(|h| h.join().ok()).collect()
            });
            let mut errors = Vec::new();
            for (part, n, part_errors) in parts {
                chunks += n;
                errors.extend(part_errors);
                let offset = self.gaps.len() as u64;
                self.gaps.extend_from_slice(&part.gaps);
                self.requests.extend(part.requests.into_iter().map(|mut r| {
                    r.gap_start += offset;
                    r
                }));
            }
            errors.sort();
            warnings.extend(errors.into_iter().map(|(_, e)| e));
        }
        // Requests a killed recorder left streaming, as their checkpoints describe them.
        let interrupted = reader.interrupted();
        if !interrupted.is_empty() {
            let block = DecodedBlock::from_records(&interrupted);
            chunks += block.chunks.len() as u64;
            warnings.push(format!(
                "{} requests were still streaming when the recorder stopped without finishing \
                 the trace: read from their last checkpoints as `interrupted`",
                interrupted.len()
            ));
            self.add_block(trace, &block, options);
        }
        let client_counts = client_token_counts(reader.manifest());
        if !client_counts.is_empty() {
            for r in &mut self.requests[first_request..] {
                r.client_output_tokens = client_counts.get(&r.id).copied();
            }
        }
        self.traces.push(TraceInfo {
            path: path.to_path_buf(),
            label: label_of(path),
            header: reader.header().clone(),
            manifest: reader.manifest().clone(),
            run_end: reader.run_end().cloned(),
            integrity: reader.integrity().verdict().to_string(),
            warnings,
            chunks,
        });
        Ok(())
    }

    /// Folds every request of a decoded block into facts.
    pub fn add_block(&mut self, trace: u32, block: &DecodedBlock, options: FactsOptions) {
        let c = &block.chunks;
        for request in &block.requests {
            let range = request.chunk_range();
            if range.end > c.len() {
                continue;
            }
            let slice = ChunkSlice {
                arrival_ns: &c.arrival_ns[range.clone()],
                channel: &c.channel[range.clone()],
                text_len: &c.text_len[range.clone()],
                tokens: &c.tokens[range],
            };
            let gaps = options.keep_gaps.then_some(&mut self.gaps);
            let f = facts::summarize(trace, &request.meta, slice, options.rules(), gaps);
            self.requests.push(f);
        }
    }

    /// Orders requests by (trace, id): blocks hold them in completion order.
    pub fn finish(&mut self) {
        // (trace, id) is unique, so an unstable sort gives the one order there is.
        self.requests.sort_unstable_by_key(|r| (r.trace, r.id));
    }

    /// Total chunks read.
    pub fn chunks(&self) -> u64 {
        self.traces.iter().map(|t| t.chunks).sum()
    }
}

/// Per-request output token counts of a client tokenizer, as an importer keeps them.
fn client_token_counts(manifest: &Manifest) -> std::collections::HashMap<u64, u32> {
    manifest
        .token_counts()
        .map(|counts| {
            counts
                .per_request
                .into_iter()
                .filter_map(|(id, c)| Some((id, c.output_tokens?)))
                .collect()
        })
        .unwrap_or_default()
}

/// One line a user can read about a part of the file the reader skipped.
fn skipped_warning(s: &tokentrace_format::Skipped) -> String {
    let kind = if s.corrupt { "damage" } else { "incomplete" };
    format!(
        "skipped block {} ({kind}; {} bytes at offset {}): {}",
        s.block, s.len, s.offset, s.reason
    )
}

/// The file name, or the whole path when it has none.
fn label_of(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::facts::ChunkRules;
    use tokentrace_format::{ClockAnchor, RequestRecord};

    /// One in-memory trace `t.tt` of `records` (anchor at realtime 1 s), facts under `rules`,
    /// gaps kept.
    pub(crate) fn dataset_of(records: &[RequestRecord], rules: ChunkRules) -> Dataset {
        let mut dataset = Dataset::default();
        for r in records {
            let f = facts::summarize_record(0, r, rules, Some(&mut dataset.gaps));
            dataset.requests.push(f);
        }
        dataset.traces.push(TraceInfo {
            path: PathBuf::from("t.tt"),
            label: "t.tt".into(),
            header: Header {
                major: 1,
                minor: 0,
                anchor: ClockAnchor {
                    mono_ns: 0,
                    realtime_ns: 1_000_000_000,
                },
                host: "test".into(),
                shard: 0,
            },
            manifest: Manifest::default(),
            run_end: None,
            integrity: "ok".into(),
            warnings: Vec::new(),
            chunks: records.iter().map(|r| r.chunks.len() as u64).sum(),
        });
        dataset
    }

    #[test]
    fn skipped_parts_read_as_a_sentence() {
        let skipped = tokentrace_format::Skipped {
            offset: 3833,
            len: 1167,
            block: 1,
            reason: "incomplete last frame".into(),
            corrupt: false,
        };
        assert_eq!(
            skipped_warning(&skipped),
            "skipped block 1 (incomplete; 1167 bytes at offset 3833): incomplete last frame"
        );
    }
}
