//! The trace writer: an OS thread that owns the file, fed through a bounded channel.
//!
//! Records are grouped into blocks; a block is flushed when its estimated size reaches
//! `block_target_bytes` or when its oldest record is `block_max_age` old (a deadline the wait
//! for the next message keeps, so it fires even when no record arrives; `inbox.rs` says how
//! the thread waits). Young checkpoints wait for a later block (`pending.rs` says why). Each
//! frame goes to the file in one `write` call, so a killed process leaves every earlier block
//! complete on disk.
//!
//! fsync policy: the header and manifest are synced at `create`, the tail (run end, index,
//! footer) at `finish`; blocks are synced only with `sync_every_block`. A killed process loses
//! nothing the kernel already has; only a power loss can cost the blocks written since the
//! last sync.

use crate::codec;
use crate::error::FormatError;
use crate::frame::{self, FrameKind, IndexEntry, CODEC_NONE, CODEC_ZSTD, MAX_RAW_LEN};
use crate::inbox::Inbox;
use crate::packed::PackedRecord;
use crate::pending::{self, estimate_bytes, HeldCheckpoint, Pending};
use crate::types::{Header, Manifest, RunEnd};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How the writer groups and compresses records.
#[derive(Debug, Clone)]
pub struct WriterConfig {
    /// Flush a block once its uncompressed payload is estimated to reach this many bytes.
    pub block_target_bytes: usize,
    /// Flush a block once its oldest record has waited this long.
    pub block_max_age: Duration,
    /// Records the channel holds before `send` blocks (and counts back-pressure).
    pub channel_capacity: usize,
    /// zstd level of block payloads (1 fastest … 19; 3 balances size and writer CPU).
    pub zstd_level: i32,
    /// fsync after every block (survives power loss; costs a disk flush per block).
    pub sync_every_block: bool,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            block_target_bytes: 1 << 20,
            block_max_age: Duration::from_secs(1),
            channel_capacity: 4096,
            zstd_level: 3,
            sync_every_block: false,
        }
    }
}

/// What the writer did, returned by [`TraceWriter::finish`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Requests written.
    pub requests: u64,
    /// Chunks written.
    pub chunks: u64,
    /// Data blocks written.
    pub blocks: u64,
    /// Size of the finished file.
    pub file_bytes: u64,
    /// Times a sender found the channel full and had to wait.
    pub backpressure_events: u64,
}

/// What the channel carries. The records are boxed: the channel allocates all of its slots up
/// front, and an inline message (336 bytes) in each of 4,096 slots would be 1.3 MB held for the
/// whole run, against one allocation per record or checkpoint sent.
enum Message {
    Record(Box<PackedRecord>),
    Checkpoint(Box<HeldCheckpoint>),
    Finish(Box<RunEnd>),
}

/// State shared by the writer thread and every sender.
#[derive(Default)]
struct Shared {
    backpressure: AtomicU64,
    failure: Mutex<Option<String>>,
}

impl Shared {
    fn closed_error(&self) -> FormatError {
        match self.failure.lock().ok().and_then(|f| f.clone()) {
            Some(message) => FormatError::WriterFailed(message),
            None => FormatError::WriterClosed,
        }
    }
}

/// A cloneable handle that hands records to the writer thread.
#[derive(Clone)]
pub struct RecordSender {
    tx: Sender<Message>,
    shared: Arc<Shared>,
}

impl RecordSender {
    /// Queues a record (a [`crate::RequestRecord`], or a [`PackedRecord`] as a recorder builds
    /// one). When the channel is full, counts one back-pressure event, then blocks until there
    /// is room. Fails if the writer has failed (the error says why) or finished.
    pub fn send(&self, record: impl Into<PackedRecord>) -> Result<(), FormatError> {
        match self.tx.try_send(Message::Record(Box::new(record.into()))) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(message)) => {
                self.shared.backpressure.fetch_add(1, Ordering::Relaxed);
                self.tx
                    .send(message)
                    .map_err(|_| self.shared.closed_error())
            }
            Err(TrySendError::Disconnected(_)) => Err(self.shared.closed_error()),
        }
    }

    /// Queues a record unless the channel is full: never waits, for a sender that must not
    /// (the recorder's stream reader). `Ok(Some(record))` gives the record back when the
    /// channel is full, for the caller to send later; nothing is counted then, as nothing
    /// waited. Fails as [`RecordSender::send`] does.
    pub fn try_send(&self, record: PackedRecord) -> Result<Option<PackedRecord>, FormatError> {
        match self.tx.try_send(Message::Record(Box::new(record))) {
            Ok(()) => Ok(None),
            Err(TrySendError::Full(Message::Record(record))) => Ok(Some(*record)),
            Err(_) => Err(self.shared.closed_error()),
        }
    }

    /// Queues the checkpoint of a request still streaming (format 1.2, see
    /// [`crate::Checkpoint`]): `record` as of now with only the chunks since its previous
    /// checkpoint, the first of which is chunk `chunk_offset` of the request. Never waits:
    /// returns false (and the caller keeps its chunks for the next checkpoint) when the
    /// channel is full or the writer has stopped. A later [`RecordSender::send`] of the same
    /// request's final record supersedes every checkpoint of it.
    pub fn checkpoint(&self, record: impl Into<PackedRecord>, chunk_offset: u64) -> bool {
        let held = HeldCheckpoint {
            record: record.into(),
            chunk_offset,
        };
        self.tx
            .try_send(Message::Checkpoint(Box::new(held)))
            .is_ok()
    }

    /// Back-pressure events counted so far (by every clone of this sender).
    pub fn backpressure_events(&self) -> u64 {
        self.shared.backpressure.load(Ordering::Relaxed)
    }
}

/// Writes a trace file from its own OS thread.
///
/// Dropped without [`TraceWriter::finish`], the thread flushes what it holds once every sender
/// is gone and stops without writing the run end and index: the file then reads like one left
/// by a killed writer (integrity "recovered").
pub struct TraceWriter {
    sender: RecordSender,
    thread: Option<JoinHandle<Result<WriterStats, FormatError>>>,
}

impl TraceWriter {
    /// Creates (or truncates) `path`, writes and syncs the header and manifest, and starts the
    /// writer thread. The header's version fields are set to the version this crate writes.
    pub fn create(
        path: &Path,
        header: Header,
        manifest: &Manifest,
        config: WriterConfig,
    ) -> Result<TraceWriter, FormatError> {
        let header = Header {
            major: frame::FORMAT_MAJOR,
            minor: frame::FORMAT_MINOR,
            ..header
        };
        let manifest_json = serde_json::to_vec(manifest)
            .map_err(|e| FormatError::Encode(format!("manifest: {e}")))?;
        let manifest_len = u32::try_from(manifest_json.len())
            .ok()
            .filter(|&len| len <= MAX_RAW_LEN)
            .ok_or_else(|| FormatError::Encode("manifest too large".into()))?;
        let mut start = frame::encode_file_header(&header);
        start.extend(frame::encode_frame(
            FrameKind::Manifest,
            CODEC_NONE,
            0,
            manifest_len,
            &manifest_json,
        ));

        let compressor = zstd::bulk::Compressor::new(config.zstd_level)
            .map_err(|e| FormatError::Encode(format!("zstd: {e}")))?;
        let mut file = File::create(path).map_err(|e| FormatError::io("creating", path, e))?;
        file.write_all(&start)
            .and_then(|()| file.sync_data())
            .map_err(|e| FormatError::io("writing header of", path, e))?;

        let (tx, rx) = crossbeam_channel::bounded(config.channel_capacity.max(1));
        let shared = Arc::new(Shared::default());
        let mut state = WriterState {
            file,
            path: path.to_path_buf(),
            offset: start.len() as u64,
            compressor,
            compressed: Vec::new(),
            raw: Vec::new(),
            frame: Vec::new(),
            config,
            index: Vec::new(),
            stats: WriterStats::default(),
            open: Default::default(),
        };
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("tokentrace-writer".into())
            .spawn(move || {
                let result = state.run(&rx, &thread_shared);
                if let Err(err) = &result {
                    if let Ok(mut failure) = thread_shared.failure.lock() {
                        *failure = Some(err.to_string());
                    }
                }
                result
            })
            .map_err(|e| FormatError::io("starting writer thread for", path, e))?;
        Ok(TraceWriter {
            sender: RecordSender { tx, shared },
            thread: Some(thread),
        })
    }

    /// A handle for sending records; clone it freely.
    pub fn sender(&self) -> RecordSender {
        self.sender.clone()
    }

    /// Stops without finishing: once every other sender is dropped too, the thread flushes
    /// what it holds and ends, and the file reads like one a killed writer left (no run end,
    /// no index). For tests and tools that need such a file made deterministically.
    pub fn abandon(mut self) -> Result<WriterStats, FormatError> {
        let thread = self.thread.take().ok_or(FormatError::WriterClosed)?;
        drop(self);
        thread
            .join()
            .map_err(|_| FormatError::WriterFailed("writer thread panicked".into()))?
    }

    /// Flushes the last block, writes the run end, the index and the footer, syncs, and stops
    /// the thread. Call it after every sender is done: records queued behind it are not written.
    pub fn finish(mut self, end: RunEnd) -> Result<WriterStats, FormatError> {
        // If the thread already failed, the send fails and joining yields the real error.
        let _ = self.sender.tx.send(Message::Finish(Box::new(end)));
        let thread = self.thread.take().ok_or(FormatError::WriterClosed)?;
        let mut stats = thread
            .join()
            .map_err(|_| FormatError::WriterFailed("writer thread panicked".into()))??;
        stats.backpressure_events = self.sender.backpressure_events();
        Ok(stats)
    }
}

/// The writer thread's state.
struct WriterState {
    file: File,
    path: PathBuf,
    offset: u64,
    /// One zstd context and output buffer for every block: a fresh context per block costs
    /// its tables' allocation and first-touch page faults each time.
    compressor: zstd::bulk::Compressor<'static>,
    compressed: Vec<u8>,
    /// The block being encoded and the frame being written, kept from block to block for the
    /// same reason: a fresh megabyte per block was most of the writer's page faults once the
    /// allocator had handed the last one back to the kernel.
    raw: Vec<u8>,
    frame: Vec<u8>,
    config: WriterConfig,
    index: Vec<IndexEntry>,
    stats: WriterStats,
    /// Requests with a checkpoint written or pending and no final record yet.
    open: std::collections::HashSet<u64>,
}

/// Whether a block being written leaves the young checkpoints for a later one.
#[derive(Clone, Copy)]
enum Hold {
    /// Everything held goes in (the run's end, every sender gone, a block near the size
    /// limit).
    None,
    /// Checkpoints younger than this stay, unless they come to this many bytes or more.
    Young(Duration, usize),
}

impl WriterState {
    fn run(&mut self, rx: &Receiver<Message>, shared: &Shared) -> Result<WriterStats, FormatError> {
        // Never let one block approach the reader's size limit.
        let target = self
            .config
            .block_target_bytes
            .clamp(1, MAX_RAW_LEN as usize / 4);
        let mut pending = Pending::default();
        let mut inbox = Inbox::new(rx);
        // Young checkpoints held back from a block that fills up come to less than half a
        // block, so holding them never makes the next block flush at once.
        let hold = Hold::Young(pending::hold(self.config.block_max_age), target / 2);
        loop {
            let message = inbox.next(pending.oldest.map(|t| t + self.config.block_max_age));
            let now = Instant::now();
            match message {
                Ok(Message::Record(record)) => {
                    if !self.open.is_empty() {
                        self.open.remove(&record.meta.id);
                    }
                    if !pending.is_empty()
                        && pending.bytes + estimate_bytes(&record) > MAX_RAW_LEN as usize / 2
                    {
                        self.flush(&mut pending, Hold::None)?;
                    }
                    pending.add_record(*record, now);
                }
                Ok(Message::Checkpoint(checkpoint)) => {
                    self.open.insert(checkpoint.record.meta.id);
                    if !pending.is_empty()
                        && pending.bytes + estimate_bytes(&checkpoint.record)
                            > MAX_RAW_LEN as usize / 2
                    {
                        self.flush(&mut pending, Hold::None)?;
                    }
                    pending.add_checkpoint(*checkpoint, now);
                }
                Ok(Message::Finish(mut end)) => {
                    self.flush(&mut pending, Hold::None)?;
                    if !self.open.is_empty() {
                        // Readers chain these requests' checkpoints (docs/FORMAT.md, 4.6).
                        end.client_health.checkpointed_without_final = Some(self.open.len() as u64);
                    }
                    self.write_tail(&end)?;
                    self.stats.backpressure_events = shared.backpressure.load(Ordering::Relaxed);
                    return Ok(self.stats);
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.flush(&mut pending, hold)?;
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => {
                    // Every sender is gone without finish(): keep what we have, like a kill would.
                    self.flush(&mut pending, Hold::None)?;
                    self.stats.file_bytes = self.offset;
                    return Ok(self.stats);
                }
            }
            let aged = pending
                .oldest
                .is_some_and(|t| t.elapsed() >= self.config.block_max_age);
            if pending.bytes >= target || aged {
                self.flush(&mut pending, hold)?;
            }
        }
    }

    /// Encodes, compresses and writes the pending records and checkpoints as one block (the
    /// young checkpoints stay pending under [`Hold::Young`]); writes nothing when that leaves
    /// the block empty.
    fn flush(&mut self, held: &mut Pending, hold: Hold) -> Result<(), FormatError> {
        if held.is_empty() {
            return Ok(());
        }
        let block = match hold {
            Hold::None => held.take_block(None, 0),
            Hold::Young(young, max_bytes) => {
                held.take_block(Instant::now().checked_sub(young), max_bytes)
            }
        };
        if block.records.is_empty() && block.checkpoints.is_empty() {
            return Ok(());
        }
        let checkpoints: Vec<(&PackedRecord, u64)> = block
            .checkpoints
            .iter()
            .map(|c| (&c.record, c.chunk_offset))
            .collect();
        let pending = &block.records;
        let raw = &mut self.raw;
        codec::encode_block_into(pending, &checkpoints, raw).map_err(FormatError::Encode)?;
        let raw_len = u32::try_from(raw.len())
            .ok()
            .filter(|&len| len <= MAX_RAW_LEN)
            .ok_or_else(|| {
                FormatError::Encode(format!("block of {} bytes exceeds the limit", raw.len()))
            })?;
        self.compressed.clear();
        self.compressed
            .reserve(zstd::zstd_safe::compress_bound(raw.len()));
        self.compressor
            .compress_to_buffer(raw.as_slice(), &mut self.compressed)
            .map_err(|e| FormatError::Encode(format!("zstd: {e}")))?;
        let seq = self.index.len() as u32;
        frame::encode_frame_into(
            &mut self.frame,
            FrameKind::Block,
            CODEC_ZSTD,
            seq,
            raw_len,
            &self.compressed,
        );
        let chunks: u64 = pending.iter().map(|r| r.chunks.len() as u64).sum();
        self.index.push(IndexEntry {
            offset: self.offset,
            seq,
            requests: pending.len() as u32,
            chunks,
            first_send_ns: pending.iter().map(|r| r.meta.send_ns).min().unwrap_or(0),
            last_end_ns: pending.iter().map(|r| r.meta.end_ns).max().unwrap_or(0),
        });
        let frame = std::mem::take(&mut self.frame);
        let written = self.write(&frame, self.config.sync_every_block);
        self.frame = frame;
        self.let_go_of_outsize_buffers();
        written?;
        self.stats.requests += pending.len() as u64;
        self.stats.chunks += chunks;
        self.stats.blocks += 1;
        Ok(())
    }

    /// Frees the kept buffers when one block made them far larger than blocks usually are
    /// (one flushed near the size limit), so that a rare large block does not stay resident
    /// for the rest of the run.
    fn let_go_of_outsize_buffers(&mut self) {
        let usual = 4 * self.config.block_target_bytes.max(1 << 16);
        for buffer in [&mut self.raw, &mut self.compressed, &mut self.frame] {
            if buffer.capacity() > usual {
                *buffer = Vec::new();
            }
        }
    }

    /// Writes the run end, the index and the footer in one write, then syncs.
    fn write_tail(&mut self, end: &RunEnd) -> Result<(), FormatError> {
        let json =
            serde_json::to_vec(end).map_err(|e| FormatError::Encode(format!("run end: {e}")))?;
        let run_end_offset = self.offset;
        let mut tail =
            frame::encode_frame(FrameKind::RunEnd, CODEC_NONE, 0, json.len() as u32, &json);
        let index_offset = self.offset + tail.len() as u64;
        let index = frame::encode_index(run_end_offset, &self.index);
        tail.extend(frame::encode_frame(
            FrameKind::Index,
            CODEC_NONE,
            0,
            index.len() as u32,
            &index,
        ));
        tail.extend_from_slice(&frame::encode_footer(index_offset));
        self.write(&tail, true)?;
        self.stats.file_bytes = self.offset;
        Ok(())
    }

    /// One `write` of a whole frame. On failure (disk full…) the partial frame is cut off so the
    /// file ends after its last complete block.
    fn write(&mut self, bytes: &[u8], sync: bool) -> Result<(), FormatError> {
        let result =
            self.file
                .write_all(bytes)
                .and_then(|()| if sync { self.file.sync_data() } else { Ok(()) });
        match result {
            Ok(()) => {
                self.offset += bytes.len() as u64;
                Ok(())
            }
            Err(err) => {
                // Best effort: a reader copes with a partial frame anyway.
                let _ = self.file.set_len(self.offset);
                Err(FormatError::io("writing", &self.path, err))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Message;

    #[test]
    fn a_channel_slot_holds_a_pointer_not_a_record() {
        // The channel allocates every slot up front: 4,096 of them by default.
        assert!(std::mem::size_of::<Message>() <= 16);
    }
}
