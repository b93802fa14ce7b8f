//! Chunks as a writer holds them before they are encoded: one 12-byte row per chunk, each field
//! in the width almost every value fits (`crate::narrow`), against 56 bytes for a
//! [`ChunkRecord`] (whose text field alone is 24 bytes, and `None` for every chunk of a run that
//! captures no text).
//!
//! A recorder keeps every chunk of every response in flight until the response ends, and the
//! writer keeps finished responses until their block is written, so this size, times the
//! chunks of every open stream, is most of a recorder's memory
//! (docs/performance/2026-12-01-read-path.md, "The recorder's own read path against its targets").
//!
//! Rows rather than one array per field: the recorder's reader appends to a thousand lists in
//! turn, each met again only after all the others, and a push touches one row's cache line
//! and the list's head instead of the end of six arrays and their six heads
//! (docs/performance/2026-12-04-to-05.md, *Chunks appended as rows*).

use crate::narrow::{Escapes, HighRuns, Small};
use crate::types::{Channel, ChunkRecord, RequestMeta, RequestRecord};

/// Bit of a packed channel byte that says the chunk's token count is known.
const HAS_TOKENS: u8 = 0x80;

/// One chunk's fixed fields, each in its narrow width (an escape where the value is kept whole
/// beside the rows).
#[derive(Debug, Clone, Copy)]
struct Row {
    /// The arrival time's low 32 bits (the high ones are the list's runs).
    arrival_low: u32,
    read_index: u16,
    bytes: u16,
    text_len: u16,
    /// The token count where known (its presence is the channel byte's [`HAS_TOKENS`] bit).
    tokens: u8,
    /// `Channel as u8`, with [`HAS_TOKENS`].
    channel: u8,
}

/// The values of the row fields that did not fit their width, one list per field.
#[derive(Debug, Clone, Default)]
struct Wide {
    read_index: Escapes,
    bytes: Escapes,
    text_len: Escapes,
    tokens: Escapes,
}

/// The chunks of one request, row by row, in arrival order. Two lists are equal when their
/// chunks are, whether or not a text column of only `None` was allocated.
#[derive(Debug, Clone, Default)]
pub struct PackedChunks {
    rows: Vec<Row>,
    arrival_high: HighRuns,
    /// Each chunk's text, or empty while no chunk has had any (a run capturing nothing never
    /// allocates it); once a chunk has text, one entry per chunk.
    text: Vec<Option<String>>,
    /// Touched only by a value that does not fit its row field.
    wide: Wide,
}

impl PackedChunks {
    /// Room for `capacity` chunks without reallocating (the text column is not reserved).
    pub fn with_capacity(capacity: usize) -> PackedChunks {
        PackedChunks {
            rows: Vec::with_capacity(capacity),
            ..PackedChunks::default()
        }
    }

    /// Number of chunks.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// True when there are no chunks.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Appends one chunk.
    pub fn push(&mut self, chunk: ChunkRecord) {
        let index = self.len();
        let wide = &mut self.wide;
        let flag = if chunk.tokens.is_some() {
            HAS_TOKENS
        } else {
            0
        };
        self.rows.push(Row {
            arrival_low: self.arrival_high.low(index, chunk.arrival_ns),
            read_index: wide.read_index.narrow(index, chunk.read_index),
            bytes: wide.bytes.narrow(index, chunk.bytes),
            text_len: wide.text_len.narrow(index, chunk.text_len),
            tokens: wide.tokens.narrow(index, chunk.tokens.unwrap_or(0)),
            channel: chunk.channel as u8 | flag,
        });
        if chunk.text.is_some() || !self.text.is_empty() {
            self.text.resize(index, None);
            self.text.push(chunk.text);
        }
    }

    /// Moves every chunk of `other` to the end of this list.
    pub fn append(&mut self, other: &mut PackedChunks) {
        if !other.text.is_empty() || !self.text.is_empty() {
            self.text.resize(self.len(), None);
            other.text.resize(other.len(), None);
        }
        let base = self.len();
        self.arrival_high.append(&mut other.arrival_high, base);
        let (ours, theirs) = (&mut self.wide, &mut other.wide);
        ours.read_index.append(&mut theirs.read_index, base);
        ours.bytes.append(&mut theirs.bytes, base);
        ours.text_len.append(&mut theirs.text_len, base);
        ours.tokens.append(&mut theirs.tokens, base);
        self.rows.append(&mut other.rows);
        self.text.append(&mut other.text);
    }

    /// A copy of the chunks from index `from` on (none when `from` is past the end).
    pub fn copy_from(&self, from: usize) -> PackedChunks {
        let from = from.min(self.len());
        let wide = &self.wide;
        PackedChunks {
            rows: self.rows[from..].to_vec(),
            arrival_high: self.arrival_high.copy_from(from, self.len()),
            text: self.text.get(from..).map(<[_]>::to_vec).unwrap_or_default(),
            wide: Wide {
                read_index: wide.read_index.copy_from(from),
                bytes: wide.bytes.copy_from(from),
                text_len: wide.text_len.copy_from(from),
                tokens: wide.tokens.copy_from(from),
            },
        }
    }

    /// One row field of every chunk, in order, its values kept whole put back.
    fn field<'a, T: Small + 'a>(
        &'a self,
        escapes: &'a Escapes,
        of: impl Fn(&Row) -> T + 'a,
    ) -> impl Iterator<Item = u32> + 'a {
        escapes.widen_all(self.rows.iter().map(of))
    }

    /// Every chunk's arrival time, in order (see [`ChunkRecord::arrival_ns`]).
    pub fn arrival_ns(&self) -> impl Iterator<Item = u64> + '_ {
        (self.arrival_high).join_all(self.rows.iter().map(|row| row.arrival_low))
    }

    /// Every chunk's read index, in order (see [`ChunkRecord::read_index`]).
    pub fn read_index(&self) -> impl Iterator<Item = u32> + '_ {
        self.field(&self.wide.read_index, |row| row.read_index)
    }

    /// Every chunk's size on the wire, in order (see [`ChunkRecord::bytes`]).
    pub fn bytes(&self) -> impl Iterator<Item = u32> + '_ {
        self.field(&self.wide.bytes, |row| row.bytes)
    }

    /// Every chunk's text length, in order (see [`ChunkRecord::text_len`]).
    pub fn text_len(&self) -> impl Iterator<Item = u32> + '_ {
        self.field(&self.wide.text_len, |row| row.text_len)
    }

    /// Every chunk's channel, in order (see [`ChunkRecord::channel`]).
    pub fn channels(&self) -> impl Iterator<Item = Channel> + '_ {
        self.rows.iter().map(|row| channel_of(row.channel))
    }

    /// Every chunk's token count where known, in order (see [`ChunkRecord::tokens`]).
    pub fn token_counts(&self) -> impl Iterator<Item = Option<u32>> + '_ {
        self.field(&self.wide.tokens, |row| row.tokens)
            .zip(&self.rows)
            .map(|(tokens, row)| (row.channel & HAS_TOKENS != 0).then_some(tokens))
    }

    /// Chunk `i`'s read index (None past the end).
    pub fn read_index_of(&self, i: usize) -> Option<u32> {
        let row = self.rows.get(i)?;
        Some(self.wide.read_index.widen(i, row.read_index))
    }

    /// Chunk `i`'s token count where known (None also past the end).
    pub fn tokens(&self, i: usize) -> Option<u32> {
        let row = self.rows.get(i)?;
        (row.channel & HAS_TOKENS != 0).then(|| self.wide.tokens.widen(i, row.tokens))
    }

    /// Chunk `i`'s text, if it has any.
    pub fn text(&self, i: usize) -> Option<&str> {
        self.text.get(i)?.as_deref()
    }

    /// Chunk `i` as a [`ChunkRecord`] (None past the end).
    pub fn get(&self, i: usize) -> Option<ChunkRecord> {
        let row = self.rows.get(i)?;
        let wide = &self.wide;
        Some(ChunkRecord {
            arrival_ns: self.arrival_high.join(i, row.arrival_low),
            read_index: wide.read_index.widen(i, row.read_index),
            bytes: wide.bytes.widen(i, row.bytes),
            channel: channel_of(row.channel),
            text_len: wide.text_len.widen(i, row.text_len),
            tokens: self.tokens(i),
            text: self.text(i).map(str::to_string),
        })
    }

    /// Every chunk as a [`ChunkRecord`], in order: one pass down the rows.
    pub fn iter(&self) -> impl Iterator<Item = ChunkRecord> + '_ {
        let fixed = self
            .arrival_ns()
            .zip(self.read_index())
            .zip(self.bytes())
            .zip(self.text_len())
            .zip(self.token_counts())
            .zip(self.channels());
        fixed.enumerate().map(
            |(i, (((((arrival_ns, read_index), bytes), text_len), tokens), channel))| ChunkRecord {
                arrival_ns,
                read_index,
                bytes,
                channel,
                text_len,
                tokens,
                text: self.text(i).map(str::to_string),
            },
        )
    }

    /// Bytes of text held (captured text or raw payloads).
    pub fn text_bytes(&self) -> usize {
        self.text.iter().flatten().map(String::len).sum()
    }
}

/// The channel of a packed channel byte.
fn channel_of(code: u8) -> Channel {
    // Every code was written by `push` from a `Channel`, so the fallback is never taken.
    Channel::ALL
        .get(usize::from(code & !HAS_TOKENS))
        .copied()
        .unwrap_or(Channel::Other)
}

impl PartialEq for PackedChunks {
    fn eq(&self, other: &PackedChunks) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for PackedChunks {}

impl FromIterator<ChunkRecord> for PackedChunks {
    fn from_iter<I: IntoIterator<Item = ChunkRecord>>(chunks: I) -> PackedChunks {
        let chunks = chunks.into_iter();
        let mut packed = PackedChunks::with_capacity(chunks.size_hint().0);
        for chunk in chunks {
            packed.push(chunk);
        }
        packed
    }
}

/// A request as a writer holds it: its facts and its packed chunks. Every [`RequestRecord`]
/// converts into one, so a writer's callers may hand over either.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackedRecord {
    /// Everything but the chunks.
    pub meta: RequestMeta,
    /// Every streamed event, in arrival order.
    pub chunks: PackedChunks,
}

impl From<RequestRecord> for PackedRecord {
    fn from(record: RequestRecord) -> PackedRecord {
        PackedRecord {
            meta: record.meta,
            chunks: record.chunks.into_iter().collect(),
        }
    }
}

impl PackedRecord {
    /// The request with its chunks as [`ChunkRecord`]s.
    pub fn to_record(&self) -> RequestRecord {
        RequestRecord {
            meta: self.meta.clone(),
            chunks: self.chunks.iter().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn chunk(i: u32, tokens: Option<u32>, text: Option<&str>) -> ChunkRecord {
        // Some values past each column's narrow width, and arrivals whose high 32 bits change.
        ChunkRecord {
            arrival_ns: 1_000 + u64::from(i) * 7 + (u64::from(i / 5) << 32),
            read_index: i / 2 + if i > 20 { 70_000 } else { 0 },
            bytes: if i.is_multiple_of(7) {
                70_000 + i
            } else {
                40 + i
            },
            channel: Channel::ALL[i as usize % Channel::ALL.len()],
            text_len: i % 5,
            tokens,
            text: text.map(str::to_string),
        }
    }

    fn sample() -> Vec<ChunkRecord> {
        (0..23)
            .map(|i| {
                let tokens = match i % 3 {
                    0 => None,
                    1 => Some(0),
                    _ => Some(u32::MAX - i),
                };
                let text = (i % 4 == 3).then_some("héllo");
                chunk(i, tokens, text)
            })
            .collect()
    }

    /// Every field of every chunk, the token count's presence and a text that starts late
    /// included, comes back as it went in.
    #[test]
    fn chunks_come_back_as_they_went_in() {
        let chunks = sample();
        let packed: PackedChunks = chunks.iter().cloned().collect();
        assert_eq!(packed.len(), chunks.len());
        assert_eq!(packed.iter().collect::<Vec<_>>(), chunks);
        assert_eq!(packed.get(chunks.len()), None);
        for (i, chunk) in chunks.iter().enumerate() {
            assert_eq!(packed.read_index_of(i), Some(chunk.read_index), "chunk {i}");
        }
        assert_eq!(packed.read_index_of(chunks.len()), None);
        assert_eq!(packed.text_bytes(), 5 * "héllo".len());
    }

    fn any_u32() -> impl Strategy<Value = u32> {
        prop_oneof![0..300u32, 65_530..65_540u32, any::<u32>()]
    }

    fn any_chunk() -> impl Strategy<Value = ChunkRecord> {
        let arrival = prop_oneof![0..10_000_000_000u64, any::<u64>()];
        let channel = (0..Channel::ALL.len()).prop_map(|i| Channel::ALL[i]);
        let text = proptest::option::weighted(0.1, "[a-z]{0,3}");
        (arrival, any_u32(), any_u32(), channel, any_u32())
            .prop_flat_map(move |fields| {
                (Just(fields), proptest::option::of(any_u32()), text.clone())
            })
            .prop_map(
                |((arrival_ns, read_index, bytes, channel, text_len), tokens, text)| ChunkRecord {
                    arrival_ns,
                    read_index,
                    bytes,
                    channel,
                    text_len,
                    tokens,
                    text,
                },
            )
    }

    proptest! {
        /// Whatever the values, each chunk comes back by index and in order, and a tail
        /// copied at any split and appended to the head gives the whole list.
        #[test]
        fn any_chunks_come_back(
            chunks in proptest::collection::vec(any_chunk(), 0..40),
            split in 0..45usize,
        ) {
            let packed: PackedChunks = chunks.iter().cloned().collect();
            prop_assert_eq!(packed.iter().collect::<Vec<_>>(), chunks.clone());
            let indexed: Vec<_> = (0..chunks.len()).filter_map(|i| packed.get(i)).collect();
            prop_assert_eq!(&indexed, &chunks);
            let mut head: PackedChunks = chunks.iter().take(split).cloned().collect();
            let mut tail = packed.copy_from(split);
            head.append(&mut tail);
            prop_assert_eq!(head.iter().collect::<Vec<_>>(), chunks);
        }
    }

    /// A run capturing no text never allocates the text column.
    #[test]
    fn chunks_without_text_hold_no_text_column() {
        let packed: PackedChunks = (0..10).map(|i| chunk(i, Some(1), None)).collect();
        assert!(packed.text.is_empty());
        assert_eq!(packed.text(3), None);
    }

    /// A list whose text column holds only `None` equals the same chunks without one.
    #[test]
    fn an_all_none_text_column_does_not_make_lists_differ() {
        let chunks = sample();
        let packed: PackedChunks = chunks.iter().cloned().collect();
        let tail = packed.copy_from(4);
        let plain: PackedChunks = chunks[4..]
            .iter()
            .cloned()
            .map(|mut c| {
                c.text = None;
                c
            })
            .collect();
        let mut without_text = tail.clone();
        without_text.text.iter_mut().for_each(|t| *t = None);
        assert!(!without_text.text.is_empty() && plain.text.is_empty());
        assert_eq!(without_text, plain);
        assert_ne!(tail, plain);
    }

    /// Copying a tail and appending it to the head gives the whole list back, for every split,
    /// with text on either side or neither.
    #[test]
    fn a_split_copied_and_appended_is_the_whole_list() {
        for chunks in [sample(), (0..9).map(|i| chunk(i, None, None)).collect()] {
            let packed: PackedChunks = chunks.iter().cloned().collect();
            for split in 0..=chunks.len() + 1 {
                let mut head: PackedChunks = chunks.iter().take(split).cloned().collect();
                let mut tail = packed.copy_from(split);
                head.append(&mut tail);
                assert!(tail.is_empty());
                assert_eq!(head.iter().collect::<Vec<_>>(), chunks, "split {split}");
            }
        }
    }
}
