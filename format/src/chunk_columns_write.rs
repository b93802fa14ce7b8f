//! Writes the seven chunk columns of a block payload (docs/FORMAT.md 4.4), the mirror of
//! `chunk_columns.rs`. Every chunk a recorder records passes here at least once (again when a
//! checkpoint carried it), so the elements are written by hand against the byte spec rather
//! than through bincode's generic encoder (whose per-element `Result` plumbing and writer
//! calls were most of the writer's own CPU after zstd). The bytes are bincode's `standard()`
//! encoding exactly; the tests hold them to bincode's own.

/// One element of a chunk column, written as bincode's standard configuration writes it.
pub(crate) trait ColumnItem {
    /// Writes the element's bytes at `batch[at..]` and returns where they end; bytes that do
    /// not fit in the batch (a long text) go to `out`, after the batch's first `at` bytes, and
    /// the batch is then empty (0 returned).
    fn put(self, batch: &mut Batch, at: usize, out: &mut Vec<u8>) -> usize;
}

/// Bytes gathered on the stack before they are appended to the payload. A push onto the
/// payload's `Vec` per byte loads and stores its length and checks its capacity every time;
/// here the position stays in a register for a whole run of elements.
const BATCH: usize = 256;

/// The batch an element is written into.
pub(crate) type Batch = [u8; BATCH];

/// Room made before each element: an `Option` tag and the longest varint.
const MAX_FIXED: usize = 1 + 9;

/// An unsigned varint at `batch[at..]`: one byte up to 250, else a 251/252/253 prefix and
/// 2/4/8 LE bytes. Returns where it ends (the caller made room for [`MAX_FIXED`]).
#[inline(always)]
fn varint(batch: &mut Batch, at: usize, v: u64) -> usize {
    if v < 251 {
        batch[at] = v as u8;
        at + 1
    } else if v <= u64::from(u16::MAX) {
        batch[at] = 251;
        batch[at + 1..at + 3].copy_from_slice(&(v as u16).to_le_bytes());
        at + 3
    } else if v <= u64::from(u32::MAX) {
        batch[at] = 252;
        batch[at + 1..at + 5].copy_from_slice(&(v as u32).to_le_bytes());
        at + 5
    } else {
        batch[at] = 253;
        batch[at + 1..at + 9].copy_from_slice(&v.to_le_bytes());
        at + 9
    }
}

impl ColumnItem for u8 {
    #[inline(always)]
    fn put(self, batch: &mut Batch, at: usize, _: &mut Vec<u8>) -> usize {
        batch[at] = self;
        at + 1
    }
}

impl ColumnItem for u32 {
    #[inline(always)]
    fn put(self, batch: &mut Batch, at: usize, _: &mut Vec<u8>) -> usize {
        varint(batch, at, u64::from(self))
    }
}

impl ColumnItem for i64 {
    /// Zigzag, then the unsigned varint.
    #[inline(always)]
    fn put(self, batch: &mut Batch, at: usize, _: &mut Vec<u8>) -> usize {
        varint(batch, at, ((self << 1) ^ (self >> 63)) as u64)
    }
}

impl<T: ColumnItem> ColumnItem for Option<T> {
    #[inline(always)]
    fn put(self, batch: &mut Batch, at: usize, out: &mut Vec<u8>) -> usize {
        match self {
            None => {
                batch[at] = 0;
                at + 1
            }
            Some(v) => {
                batch[at] = 1;
                v.put(batch, at + 1, out)
            }
        }
    }
}

impl ColumnItem for &str {
    /// The length as a varint, then the bytes.
    #[inline(always)]
    fn put(self, batch: &mut Batch, at: usize, out: &mut Vec<u8>) -> usize {
        let at = varint(batch, at, self.len() as u64);
        let bytes = self.as_bytes();
        match batch.get_mut(at..at + bytes.len()) {
            Some(room) => {
                room.copy_from_slice(bytes);
                at + bytes.len()
            }
            None => {
                out.extend_from_slice(&batch[..at]);
                out.extend_from_slice(bytes);
                0
            }
        }
    }
}

/// One column being written: its count, then its elements, each as [`ColumnItem::put`]
/// writes it (bincode's encoding of a `Vec` of them, without the `Vec`).
pub(crate) struct Column<'o> {
    out: &'o mut Vec<u8>,
    batch: Batch,
    held: usize,
    len: usize,
    written: usize,
}

impl<'o> Column<'o> {
    /// A column of exactly `len` elements, appended to `out`.
    pub(crate) fn new(out: &'o mut Vec<u8>, len: usize) -> Column<'o> {
        let mut batch = [0; BATCH];
        let held = varint(&mut batch, 0, len as u64);
        Column {
            out,
            batch,
            held,
            len,
            written: 0,
        }
    }

    /// Appends every element of `items`.
    #[inline(always)]
    pub(crate) fn extend<T: ColumnItem>(&mut self, items: impl Iterator<Item = T>) {
        let (mut at, mut written) = (self.held, 0);
        let (batch, out) = (&mut self.batch, &mut *self.out);
        items.for_each(|item| {
            if at > BATCH - MAX_FIXED {
                out.extend_from_slice(&batch[..at]);
                at = 0;
            }
            at = item.put(batch, at, out);
            written += 1;
        });
        self.held = at;
        self.written += written;
    }

    /// Ends the column; Err when it did not get the count it was opened with.
    pub(crate) fn finish(self) -> Result<(), String> {
        self.out.extend_from_slice(&self.batch[..self.held]);
        if self.written != self.len {
            return Err(format!(
                "a column of {} entries yielded {}",
                self.len, self.written
            ));
        }
        Ok(())
    }
}

/// `items` (exactly `len` of them) through one [`Column`]: what the codec writes, for the
/// tests to hold against bincode's own encoding.
#[cfg(test)]
fn put_seq<T: ColumnItem>(
    out: &mut Vec<u8>,
    len: usize,
    items: impl Iterator<Item = T>,
) -> Result<(), String> {
    let mut col = Column::new(out, len);
    col.extend(items);
    col.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ours<T: ColumnItem + Clone>(items: &[T]) -> Vec<u8> {
        let mut out = Vec::new();
        put_seq(&mut out, items.len(), items.iter().cloned()).unwrap();
        out
    }

    fn bincodes<T: bincode::Encode>(items: &[T]) -> Vec<u8> {
        bincode::encode_to_vec(items, bincode::config::standard()).unwrap()
    }

    /// Every width's edges, where a hand-written varint goes wrong first.
    const EDGES: [u64; 10] = [
        0,
        250,
        251,
        u16::MAX as u64,
        u16::MAX as u64 + 1,
        u32::MAX as u64,
        u32::MAX as u64 + 1,
        u64::MAX - 1,
        u64::MAX,
        1 << 40,
    ];

    #[test]
    fn widths_at_their_edges_are_bincodes() {
        let u32s: Vec<u32> = EDGES.iter().map(|&v| v as u32).collect();
        assert_eq!(ours(&u32s), bincodes(&u32s));
        let i64s: Vec<i64> = EDGES
            .iter()
            .flat_map(|&v| [v as i64, (v as i64).wrapping_neg(), (v / 2) as i64])
            .chain([i64::MIN, i64::MAX, -1, -125, -126])
            .collect();
        assert_eq!(ours(&i64s), bincodes(&i64s));
    }

    #[test]
    fn a_count_the_iterator_does_not_keep_is_refused() {
        let mut out = Vec::new();
        let err = put_seq(&mut out, 3, [1u32, 2].into_iter()).unwrap_err();
        assert_eq!(err, "a column of 3 entries yielded 2");
    }

    proptest! {
        #[test]
        fn every_column_type_writes_bincodes_bytes(
            u8s in proptest::collection::vec(any::<u8>(), 0..64),
            u32s in proptest::collection::vec(any::<u32>(), 0..64),
            i64s in proptest::collection::vec(any::<i64>(), 0..64),
            small in proptest::collection::vec(-70_000i64..70_000, 0..64),
            tokens in proptest::collection::vec(proptest::option::of(any::<u32>()), 0..64),
            texts in proptest::collection::vec(proptest::option::of(".{0,300}"), 0..16),
        ) {
            prop_assert_eq!(ours(&u8s), bincodes(&u8s));
            prop_assert_eq!(ours(&u32s), bincodes(&u32s));
            prop_assert_eq!(ours(&i64s), bincodes(&i64s));
            prop_assert_eq!(ours(&small), bincodes(&small));
            prop_assert_eq!(ours(&tokens), bincodes(&tokens));
            let texts: Vec<Option<&str>> = texts.iter().map(|t| t.as_deref()).collect();
            prop_assert_eq!(ours(&texts), bincodes(&texts));
        }
    }
}
