//! Chunks as a writer holds them before they are encoded: one column per field, each in the
//! width almost every value fits (`crate::narrow`), 12 bytes per chunk against 56 for a
//! [`ChunkRecord`] (whose text field alone is 24 bytes, and `None` for every chunk of a run that
//! captures no text).
//!
//! A recorder keeps every chunk of every response in flight until the response ends, and the
//! writer keeps finished responses until their block is written, so this size, times the
//! chunks of every open stream, is most of a recorder's memory (docs/PERFORMANCE.md, "The
//! recorder's own read path against its targets").

use crate::narrow::{Narrow, Times};
use crate::types::{Channel, ChunkRecord, RequestMeta, RequestRecord};

/// Bit of a packed channel byte that says the chunk's token count is known.
const HAS_TOKENS: u8 = 0x80;

/// The chunks of one request, column by column, in arrival order. Two lists are equal when
/// their chunks are, whether or not a text column of only `None` was allocated.
#[derive(Debug, Clone, Default)]
pub struct PackedChunks {
    arrival_ns: Times,
    read_index: Narrow<u16>,
    bytes: Narrow<u16>,
    text_len: Narrow<u16>,
    /// The token count where known (its presence is the channel byte's [`HAS_TOKENS`] bit).
    tokens: Narrow<u8>,
    /// `Channel as u8`, with [`HAS_TOKENS`].
    channel: Vec<u8>,
    /// Each chunk's text, or empty while no chunk has had any (a run capturing nothing never
    /// allocates it); once a chunk has text, one entry per chunk.
    text: Vec<Option<String>>,
}

impl PackedChunks {
    /// Room for `capacity` chunks without reallocating (the text column is not reserved).
    pub fn with_capacity(capacity: usize) -> PackedChunks {
        PackedChunks {
            arrival_ns: Times::with_capacity(capacity),
            read_index: Narrow::with_capacity(capacity),
            bytes: Narrow::with_capacity(capacity),
            text_len: Narrow::with_capacity(capacity),
            tokens: Narrow::with_capacity(capacity),
            channel: Vec::with_capacity(capacity),
            text: Vec::new(),
        }
    }

    /// Number of chunks.
    pub fn len(&self) -> usize {
        self.channel.len()
    }

    /// True when there are no chunks.
    pub fn is_empty(&self) -> bool {
        self.channel.is_empty()
    }

    /// Appends one chunk.
    pub fn push(&mut self, chunk: ChunkRecord) {
        let index = self.len();
        self.arrival_ns.push(chunk.arrival_ns);
        self.read_index.push(chunk.read_index);
        self.bytes.push(chunk.bytes);
        self.text_len.push(chunk.text_len);
        self.tokens.push(chunk.tokens.unwrap_or(0));
        let flag = if chunk.tokens.is_some() {
            HAS_TOKENS
        } else {
            0
        };
        self.channel.push(chunk.channel as u8 | flag);
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
        self.arrival_ns.append(&mut other.arrival_ns);
        self.read_index.append(&mut other.read_index);
        self.bytes.append(&mut other.bytes);
        self.text_len.append(&mut other.text_len);
        self.tokens.append(&mut other.tokens);
        self.channel.append(&mut other.channel);
        self.text.append(&mut other.text);
    }

    /// A copy of the chunks from index `from` on (none when `from` is past the end).
    pub fn copy_from(&self, from: usize) -> PackedChunks {
        let from = from.min(self.len());
        PackedChunks {
            arrival_ns: self.arrival_ns.copy_from(from),
            read_index: self.read_index.copy_from(from),
            bytes: self.bytes.copy_from(from),
            text_len: self.text_len.copy_from(from),
            tokens: self.tokens.copy_from(from),
            channel: self.channel[from..].to_vec(),
            text: self.text.get(from..).map(<[_]>::to_vec).unwrap_or_default(),
        }
    }

    /// Every chunk's arrival time, in order (see [`ChunkRecord::arrival_ns`]).
    pub fn arrival_ns(&self) -> impl Iterator<Item = u64> + '_ {
        self.arrival_ns.iter()
    }

    /// Every chunk's read index, in order (see [`ChunkRecord::read_index`]).
    pub fn read_index(&self) -> impl Iterator<Item = u32> + '_ {
        self.read_index.iter()
    }

    /// Every chunk's size on the wire, in order (see [`ChunkRecord::bytes`]).
    pub fn bytes(&self) -> impl Iterator<Item = u32> + '_ {
        self.bytes.iter()
    }

    /// Every chunk's text length, in order (see [`ChunkRecord::text_len`]).
    pub fn text_len(&self) -> impl Iterator<Item = u32> + '_ {
        self.text_len.iter()
    }

    /// Chunk `i`'s channel (None past the end).
    pub fn channel(&self, i: usize) -> Option<Channel> {
        self.channel.get(i).map(|&code| channel_of(code))
    }

    /// Chunk `i`'s token count where known (None also past the end).
    pub fn tokens(&self, i: usize) -> Option<u32> {
        let flags = self.channel.get(i)?;
        if flags & HAS_TOKENS == 0 {
            return None;
        }
        self.tokens.get(i)
    }

    /// Chunk `i`'s text, if it has any.
    pub fn text(&self, i: usize) -> Option<&str> {
        self.text.get(i)?.as_deref()
    }

    /// Chunk `i` as a [`ChunkRecord`] (None past the end).
    pub fn get(&self, i: usize) -> Option<ChunkRecord> {
        Some(ChunkRecord {
            arrival_ns: self.arrival_ns.get(i)?,
            read_index: self.read_index.get(i)?,
            bytes: self.bytes.get(i)?,
            channel: self.channel(i)?,
            text_len: self.text_len.get(i)?,
            tokens: self.tokens(i),
            text: self.text(i).map(str::to_string),
        })
    }

    /// Every chunk as a [`ChunkRecord`], in order: one pass down the columns.
    pub fn iter(&self) -> impl Iterator<Item = ChunkRecord> + '_ {
        let fixed = self
            .arrival_ns
            .iter()
            .zip(self.read_index.iter())
            .zip(self.bytes.iter())
            .zip(self.text_len.iter())
            .zip(self.tokens.iter())
            .zip(&self.channel);
        fixed.enumerate().map(
            |(i, (((((arrival_ns, read_index), bytes), text_len), tokens), &code))| ChunkRecord {
                arrival_ns,
                read_index,
                bytes,
                channel: channel_of(code),
                text_len,
                tokens: (code & HAS_TOKENS != 0).then_some(tokens),
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
